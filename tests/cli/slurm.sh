#!/usr/bin/env bash
# Slurm for real: a one-node cluster (slurmctld, slurmd, munge from Debian) is
# started on loopback in a temporary folder and stopped at the end.
#   - the batch script of docs/slurm.md, taken verbatim from the document
#     (sbatch options on the command line size it for this machine: 1 node,
#     2 tasks, 1 CPU each), runs `srun --mpi=pmix ... loom train job.yaml` at
#     2 ranks: the losses equal the 1-rank run's;
#   - `scancel --signal=TERM` during training: both ranks finish the step,
#     write a checkpoint and exit 75, the script requeues the job, and the
#     requeued job resumes from that checkpoint and ends with the
#     uninterrupted run's losses;
#   - a plain `scancel`: the ranks still write their checkpoint before the job
#     ends (CANCELLED, not requeued), and a new submission resumes from it;
#   - `loom launch` inside an allocation (salloc): mpirun takes the ranks
#     from Slurm (2 tasks) and the run gives the same losses.
#   $1 = loom binary, $2 = tests/data directory
source "$(dirname "$0")/lib/layouts.sh" "$@"
source "$here/lib/slurm.sh"
trap 'slurm_stop; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; [[ -n $slurm_dir ]] && for f in "$slurm_dir"/log/*.log; do echo "== $f"; tail -n 20 "$f"; done >&2; exit 1; }
slurm_start 2 || { echo "SKIP: $slurm_why"; exit 0; }
export PATH=$(dirname "$loom"):$PATH  # the script runs `loom`
unset OMPI_MCA_rmaps_base_oversubscribe

# The batch script, exactly as docs/slurm.md shows it.
awk '/^## Batch script/ {on=1; next} on && /^```bash/ {copy=1; next} copy && /^```/ {exit} copy' \
  "$here/../../docs/slurm.md" > train.sbatch
grep -q '^srun --mpi=pmix ' train.sbatch || fail "no srun line in the script taken from docs/slurm.md"
sbatch_here() {  # JOB_NAME: submits train.sbatch sized for this machine, prints the job id
  sbatch --parsable --job-name="$1" --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 \
    --time=00:05:00 "$work/train.sbatch"
}
wait_job() {  # JOBID SECONDS: until the job has ended
  local i s
  for i in $(seq $(($2 * 5))); do
    s=$(slurm_job_state "$1")
    [[ $s == COMPLETED || $s == FAILED || $s == CANCELLED || $s == TIMEOUT || $s == NODE_FAIL ]] && { echo "$s"; return 0; }
    sleep 0.2
  done
  echo "still ${s:-unknown} after $2 s"
}

layout_configs
layout_job masked-lm bert.json wordpiece-multilingual-cased \
  | sed -e 's/max_steps: 10/max_steps: 24/' -e 's/save_steps: 4/save_steps: 2/' \
        -e 's/overwrite_output_dir: true/overwrite_output_dir: false/' > one.yaml
"$loom" train one.yaml --quiet --threads 1 --set hyperparameters.output_dir=ref
# Two ranks, half the batch each: the 1-rank run's global batch.
mkdir run stop
sed 's/per_device_train_batch_size: 8/per_device_train_batch_size: 4/' one.yaml > run/job.yaml
cp run/job.yaml stop/job.yaml

echo "== sbatch: the documented script at 2 ranks"
cd run
id=$(sbatch_here loom-run) || fail "sbatch"
state=$(wait_job "$id" 90)
cat "loom-run-$id.out"
[[ $state == COMPLETED ]] || fail "job $id: $state"
grep -q "global batch 8 = 4 x 1 accumulation x 2 replicas" "loom-run-$id.out" || fail "not 2 ranks"
compare "$work/ref" out 1e-6 1e-4
cd "$work"

echo "== scancel --signal=TERM mid-run: checkpoint, exit 75, requeue, resume"
cd stop
id=$(sbatch_here loom-stop) || fail "sbatch"
for _ in $(seq 1 300); do [[ -d out/checkpoint-4 ]] && break; sleep 0.1; done
[[ -d out/checkpoint-4 ]] || { cat loom-stop-*.out; fail "no checkpoint-4 before the stop"; }
scancel --signal=TERM "$id"
state=$(wait_job "$id" 120)
cat "loom-stop-$id.out"
[[ $state == COMPLETED ]] || fail "job $id: $state"
restarts=$(scontrol show job "$id" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')
if grep -q "tasks 0-1: Exited with exit code 75" "loom-stop-$id.out" && [[ ${restarts:-0} -ge 1 ]]; then
  grep -q "resuming from checkpoint-" "loom-stop-$id.out" || fail "the requeued job did not resume"
  echo "stopped, requeued ($restarts restart) and resumed"
else
  fail "job $id was not stopped and requeued (restarts ${restarts:-?}); the run may have ended before the signal"
fi
compare "$work/ref" out 1e-6 1e-4
cd "$work"

echo "== plain scancel mid-run: the ranks checkpoint before the job ends; a new job resumes"
mkdir cancel && cp run/job.yaml cancel/ && cd cancel
id=$(sbatch_here loom-cancel) || fail "sbatch"
for _ in $(seq 1 300); do [[ -d out/checkpoint-4 ]] && break; sleep 0.1; done
[[ -d out/checkpoint-4 ]] || { cat loom-cancel-*.out; fail "no checkpoint-4 before scancel"; }
scancel "$id"
state=$(wait_job "$id" 60)
[[ $state == CANCELLED ]] || { cat "loom-cancel-$id.out"; fail "job $id: $state, want CANCELLED"; }
for _ in $(seq 1 50); do grep -q "stopped by Terminated after step" "loom-cancel-$id.out" && break; sleep 0.1; done
stopped=$(sed -n 's/.*stopped by Terminated after step \([0-9]*\); checkpoint .*/\1/p' "loom-cancel-$id.out")
[[ -n $stopped && -f out/checkpoint-$stopped/loom_checkpoint.json ]] \
  || { cat "loom-cancel-$id.out"; fail "no complete checkpoint written on scancel"; }
id=$(sbatch_here loom-cancel) || fail "sbatch"
state=$(wait_job "$id" 90)
[[ $state == COMPLETED ]] || { cat "loom-cancel-$id.out"; fail "job $id: $state"; }
grep -q "resuming from checkpoint-$stopped " "loom-cancel-$id.out" || { cat "loom-cancel-$id.out"; fail "did not resume from checkpoint-$stopped"; }
compare "$work/ref" out 1e-6 1e-4
echo "scancel: checkpoint-$stopped written on the way out; the next job resumed from it"
cd "$work"

echo "== loom launch inside an allocation"
mkdir alloc && cp run/job.yaml alloc/ && cd alloc
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 \
  salloc --ntasks=2 --cpus-per-task=1 loom launch job.yaml > launch.log 2>&1 || { cat launch.log; fail "salloc loom launch"; }
grep -q "^loom launch: mpirun .*-np 2 " launch.log || { cat launch.log; fail "the launch did not take 2 ranks from the allocation"; }
compare "$work/ref" out 1e-6 1e-4
echo "slurm: ok"
