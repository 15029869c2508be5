#!/usr/bin/env bash
# `loom launch` across hosts:
#   - the exact mpirun lines for two hosts (--hosts, --hostfile,
#     --nproc-per-node), the rank count taken from the job's distribution
#     degrees, SageMaker's mpi block (processes_per_host, custom_mpi_options)
#     applied, and the errors for contradicting or malformed input;
#   - two real "hosts" on this machine: 127.0.0.2 and 127.0.0.3 in a hostfile,
#     reached through Open MPI's rsh launcher with an agent that starts the
#     remote daemon in its own UTS namespace (its own host name) instead of
#     over ssh. Ranks 0-1 land on the first host and 2-3 on the second, so
#     with placement_strategy cluster each tensor group of 2 is inside a host;
#   - `loom train` over the two hosts (1 rank each, with the same command the
#     Kubernetes MPIJob's launcher runs) gives the 1-rank run's losses, and a
#     SIGTERM to the launcher stops both ranks after a checkpoint (exit 75);
#     the same command then finishes with the uninterrupted losses.
#   $1 = loom binary, $2 = tests/data directory
source "$(dirname "$0")/lib/layouts.sh" "$@"
loom_abs=$(readlink -f "$loom")
root=$([[ $(id -u) == 0 ]] && echo "--allow-run-as-root " || true)
fail() { echo "FAIL: $*" >&2; exit 1; }
same() { [[ $1 == "$2" ]] || fail "$3:"$'\n'"  got:  $1"$'\n'"  want: $2"; }
env_x="--stdin none -x OMP_NUM_THREADS=1 -x MALLOC_MMAP_THRESHOLD_=1073741824 -x MALLOC_TRIM_THRESHOLD_=1073741824 -x MALLOC_TOP_PAD_=67108864"

echo "== mpirun lines"
out=$("$loom" launch --hosts node1:2,node2:2 --threads 1 --dry-run job.yaml -- --set seed=1)
same "$out" "mpirun ${root}-np 4 --host node1:2,node2:2 --use-hwthread-cpus --map-by slot:PE=1 --bind-to hwthread $env_x $loom_abs train job.yaml --set seed=1" "--hosts"
printf 'node1 slots=4  # first\n\n# a comment\nnode2 slots=4 max_slots=8\n' > hosts.txt
out=$("$loom" launch --hostfile hosts.txt --threads 1 --dry-run job.yaml)
same "$out" "mpirun ${root}-np 8 --hostfile hosts.txt --use-hwthread-cpus --map-by slot:PE=1 --bind-to hwthread $env_x $loom_abs train job.yaml" "--hostfile"
out=$("$loom" launch --hostfile hosts.txt --nproc-per-node 2 --threads 1 --dry-run job.yaml)
same "$out" "mpirun ${root}-np 4 --host node1:2,node2:2 --use-hwthread-cpus --map-by slot:PE=1 --bind-to hwthread $env_x $loom_abs train job.yaml" "--nproc-per-node over a hostfile"
# Inside a Slurm allocation: mpirun takes the nodes from Slurm; K per node.
out=$(SLURM_JOB_ID=7 SLURM_JOB_NUM_NODES=2 "$loom" launch --nproc-per-node 2 --threads 1 --dry-run job.yaml)
same "$out" "mpirun ${root}-np 4 --use-hwthread-cpus --map-by ppr:2:node:PE=1 --bind-to hwthread $env_x $loom_abs train job.yaml" "--nproc-per-node in an allocation"
out=$(SLURM_JOB_ID=7 SLURM_JOB_NUM_NODES=2 SLURM_NTASKS=6 "$loom" launch --threads 1 --dry-run job.yaml)
same "$out" "mpirun ${root}-np 6 --use-hwthread-cpus --map-by slot:PE=1 --bind-to hwthread $env_x $loom_abs train job.yaml" "SLURM_NTASKS in an allocation"

# The job decides the rank count and the ranks per node; its custom options reach mpirun.
layout_configs
layout_job masked-lm bert.json wordpiece-multilingual-cased > base.yaml
{ cat base.yaml; cat <<'YAML'
distribution:
  data_parallel_degree: 2
  tensor_parallel_degree: 2
  mpi: {enabled: true, processes_per_host: 2, custom_mpi_options: "-x NCCL_DEBUG=WARN --mca btl_tcp_if_include lo"}
YAML
} > sm.yaml
out=$("$loom" launch --hosts node1,node2 --threads 1 --dry-run sm.yaml 2>err.txt)
same "$out" "mpirun ${root}-np 4 --host node1:2,node2:2 --use-hwthread-cpus --map-by slot:PE=1 --bind-to hwthread $env_x -x NCCL_DEBUG=WARN --mca btl_tcp_if_include lo $loom_abs train sm.yaml" "the job's degrees and mpi block"
grep -q "4 ranks from sm.yaml: distribution degrees" err.txt || fail "no note on the rank count: $(cat err.txt)"
grep -q "each tensor group of 2 ranks is inside one node" err.txt || fail "no placement note: $(cat err.txt)"
out=$("$loom" launch --hosts node1,node2 --threads 1 --dry-run sm.yaml -- --set distribution.tensor_parallel_degree=1 2>err.txt)
grep -q -- "-np 2 " <<<"$out" || fail "--set after -- not applied to the rank count: $out"

expect_error() {  # PATTERN ARGS...: the launch fails with a message matching PATTERN
  local pattern=$1; shift
  if out=$("$loom" launch --dry-run "$@" 2>&1); then fail "accepted: $*"; fi
  grep -Eq -- "$pattern" <<<"$out" || fail "launch $*: no message matching '$pattern' in: $out"
}
expect_error "--nproc 3 but sm.yaml:[0-9]+: distribution.data_parallel_degree 2 x pipeline_parallel_degree 1 x tensor_parallel_degree 2 = 4 ranks" --nproc 3 sm.yaml
expect_error "--nproc-per-node 4 but sm.yaml:[0-9]+: distribution.mpi.processes_per_host is 2" --nproc-per-node 4 --hosts a,b sm.yaml
expect_error "4 ranks on this machine, but 2 per node \(sm.yaml: distribution.mpi.processes_per_host\)" sm.yaml
expect_error "6 ranks but the hosts offer 4 slots \(a:2,b:2\)" --nproc 6 --hosts a:2,b:2 job.yaml
expect_error "--hosts entry 'b:zero': expected a whole number of slots" --hosts a:2,b:zero job.yaml
printf 'node1 slots=2\nnode2 cpus=2\n' > bad_hosts.txt
expect_error "bad_hosts.txt:2: 'cpus=2': expected 'host \[slots=N\] \[max_slots=N\]'" --hostfile bad_hosts.txt job.yaml
expect_error "give --hosts or --hostfile, not both" --hosts a --hostfile hosts.txt job.yaml
expect_error "how many ranks\? .*\(missing.yaml was not found\)" missing.yaml

# --- two hosts on loopback -----------------------------------------------------
cat > agent.sh <<'SH'
#!/bin/sh
# Open MPI's rsh agent is called as: agent HOST COMMAND...; the "host" gets
# its own UTS namespace, so its daemon and ranks report their own host name.
host=$1; shift
exec unshare --uts sh -c "hostname host-$(echo "$host" | tr . -) && exec $*"
SH
chmod +x agent.sh
if ! unshare --uts true 2>/dev/null; then
  echo "SKIP (two-host runs): unshare --uts is not permitted here; only the mpirun lines were checked"
  echo "launch_hosts: ok"; exit 0
fi
export OMPI_MCA_plm_rsh_agent=$PWD/agent.sh
printf '127.0.0.2 slots=2\n127.0.0.3 slots=2\n' > hostfile

echo "== rank-info on two hosts, placement cluster and spread"
for placement in cluster spread; do
  out=$(timeout 120 "$loom" launch --hostfile hostfile --threads 1 --cmd rank-info job.yaml -- \
        --tp 2 --placement "$placement" 2>&1) || fail "rank-info over two hosts: $out"
  for r in 0 1 2 3; do
    host=$([[ $r -lt 2 ]] && echo host-127-0-0-2 || echo host-127-0-0-3)
    tp=$([[ $placement == cluster ]] && echo $((r % 2)) || echo $((r / 2)))
    grep -Eq "^rank $r of 4: .*tp $tp\) \| host $host .*sum of ranks 6 " <<<"$out" \
      || fail "$placement: rank $r is not tp $tp on $host:"$'\n'"$out"
  done
done
echo "ranks 0-1 on host-127-0-0-2, 2-3 on host-127-0-0-3; tensor groups inside a host with cluster, across hosts with spread"

echo "== loom train on two hosts, one rank each, as the MPIJob's launcher runs it"
# docs/kubernetes-mpijob.yaml's launcher command, with this test's hostfile,
# thread count and job file in place of the cluster's.
k8s=$(sed -n 's/^ *args: \[launch, \(.*\)\]$/\1/p' "$here/../../docs/kubernetes-mpijob.yaml" | tr -d ',"')
same "$k8s" "--hostfile /etc/mpi/hostfile --threads 8 /data/job.yaml" "the MPIJob launcher's arguments"
read -r -a launch_args <<<"$(sed -e 's|/etc/mpi/hostfile|hostfile|' -e 's|--threads 8|--threads 1|' \
                              -e 's|/data/job.yaml|two.yaml|' <<<"$k8s")"
printf '127.0.0.2 slots=1\n127.0.0.3 slots=1\n' > hostfile
sed -e 's/max_steps: 10/max_steps: 16/' -e 's/save_steps: 4/save_steps: 2/' base.yaml > job.yaml
"$loom" train job.yaml --quiet --threads 1 --set hyperparameters.output_dir=ref
sed -i 's/overwrite_output_dir: true/overwrite_output_dir: false/' job.yaml
# Two ranks with half the batch each: the same global batch as the 1-rank run.
{ sed 's/per_device_train_batch_size: 8/per_device_train_batch_size: 4/' job.yaml
  echo "distribution: {collective_timeout_s: 60}"; } > two.yaml
timeout 300 "$loom" launch "${launch_args[@]}" > two.log 2>&1 || { cat two.log; fail "train over two hosts"; }
grep -q "^loom launch: mpirun .*--hostfile hostfile " two.log || fail "not launched over the hostfile: $(head -3 two.log)"
compare ref out 1e-6 1e-4

echo "== SIGTERM to the launcher of a two-host run, then the same command again"
rm -rf out
# --foreground: timeout passes the signal below to loom alone; without it,
# it also signals its whole process group, ranks included, and the ranks'
# own SIGTERM races the launcher's orderly SIGUSR1.
timeout --foreground 300 "$loom" launch "${launch_args[@]}" > stop.log 2>&1 &
launcher=$!
for _ in $(seq 1 300); do [[ -d out/checkpoint-4 ]] && break; sleep 0.1; done
[[ -d out/checkpoint-4 ]] || { cat stop.log; fail "no checkpoint before the stop"; }
kill -TERM "$launcher"
set +e; wait "$launcher"; rc=$?; set -e
if [[ $rc == 75 ]]; then
  grep -q "passed SIGUSR1 through mpirun" stop.log || { cat stop.log; fail "SIGUSR1 not passed"; }
  steps=$(python3 -c "import json; print(max(json.loads(l)['step'] for l in open('out/metrics.jsonl') if 'loss' in l))")
  (( steps < 16 )) || { cat stop.log; fail "exit 75 but the run reached its end"; }
  echo "stopped with status 75 after step $steps"
else
  [[ $rc == 0 ]] || { cat stop.log; fail "stopped run: exit status $rc (want 75, or 0 if it had finished)"; }
  echo "the run had finished before the signal (status 0)"
fi
timeout 300 "$loom" launch "${launch_args[@]}" > resume.log 2>&1 || { cat resume.log; fail "resume over two hosts"; }
if [[ $rc == 75 ]]; then
  grep -q "resuming from checkpoint-" resume.log || { cat resume.log; fail "the rerun did not resume"; }
fi
compare ref out 1e-6 1e-4
echo "launch_hosts: ok"
