#!/usr/bin/env bash
# `loom launch` on one machine: the mpirun line it builds (root, oversubscription, binding,
# OMP_NUM_THREADS, malloc variables, extra args), and a real 2-rank run of the
# hidden `loom rank-info` that must see both ranks talk over MPI.
# Usage: launch_rank_info.sh LOOM_BINARY TESTS_DATA_DIR
set -u
loom=$1
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
expect_line() { grep -Eq -- "$2" <<<"$1" || fail "$3: no line matching '$2' in:"$'\n'"$1"; }
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc obeys both
loom_abs=$(readlink -f "$loom")

# --- the command line -------------------------------------------------------
out=$("$loom" launch --nproc 1 --dry-run job.yaml -- --set learning_rate=1e-4) || fail "dry run exited $?"
expect_line "$out" "^mpirun .*-np 1 " "process count"
expect_line "$out" " --use-hwthread-cpus --map-by slot:PE=$cores --bind-to hwthread " "each rank bound to its cores when ranks <= cores"
expect_line "$out" " -x OMP_NUM_THREADS=$cores " "threads = cores / 1"
expect_line "$out" " -x MALLOC_MMAP_THRESHOLD_=1073741824 -x MALLOC_TRIM_THRESHOLD_=1073741824 " "malloc fix"
expect_line "$out" " $loom_abs train job.yaml --set learning_rate=1e-4$" "program, default command and extra args"
grep -q -- "--oversubscribe" <<<"$out" && fail "oversubscribe with 1 rank: $out"
if [[ $(id -u) == 0 ]]; then expect_line "$out" "^mpirun --allow-run-as-root " "root flag"; fi

many=$((cores * 2))
out=$("$loom" launch --nproc "$many" --cmd eval --mpi-arg=--report-bindings --dry-run job.yaml) || fail "dry run exited $?"
expect_line "$out" " -np $many --oversubscribe --map-by slot --bind-to none " "more ranks than cores"
expect_line "$out" " -x OMP_NUM_THREADS=1 " "at least one thread"
expect_line "$out" " --report-bindings $loom_abs eval job.yaml$" "--mpi-arg and --cmd"

"$loom" launch --nproc 0 --dry-run job.yaml >/dev/null 2>&1 && fail "--nproc 0 accepted"
"$loom" launch --nproc 2 --dry-run >/dev/null 2>&1 && fail "missing job file accepted"

# --- a real run on 2 ranks ----------------------------------------------------
out=$(timeout 120 "$loom" launch --nproc 2 --cmd rank-info job.yaml -- --tp 2 --set x=1 2>&1)
rc=$?
[[ $rc == 0 ]] || fail "launch of rank-info exited $rc: $out"
expect_line "$out" "^rank 0 of 2: DP1-PP1-TP2 rank 0 = \(dp 0, pp 0, tp 0\) .*sum of ranks 1 \| args: job.yaml --set x=1$" "rank 0"
expect_line "$out" "^rank 1 of 2: DP1-PP1-TP2 rank 1 = \(dp 0, pp 0, tp 1\) .*sum of ranks 1 \| args: job.yaml --set x=1$" "rank 1"
expect_line "$out" "OMP_NUM_THREADS=$(( cores / 2 > 0 ? cores / 2 : 1 )) " "threads reach the ranks"

# --- several launches at once ------------------------------------------------
# Each launch gets its own Open MPI session directory under TMPDIR, so jobs
# started together on one node do not race for /tmp/ompi.<host>.<uid>
# (open-mpi/ompi#8510), and removes it when it ends. Without that a few in a
# hundred such mpiruns fail: this catches a regression often, not always.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for round in 1 2 3; do
  for i in 1 2 3 4 5 6; do
    env -u OMPI_MCA_orte_tmpdir_base TMPDIR="$tmp" timeout 120 "$loom" launch --nproc 2 --threads 1 --cmd rank-info job.yaml \
      >"$tmp/par$i.out" 2>&1 &
  done
  for i in 1 2 3 4 5 6; do wait -n || fail "round $round: a concurrent launch failed"; done
  for i in 1 2 3 4 5 6; do
    expect_line "$(cat "$tmp/par$i.out")" "^rank 1 of 2: .*\| mpi session base $tmp/loom-launch-[A-Za-z0-9]{6} \|" \
      "round $round launch $i: a private session base"
  done
  left=$(find "$tmp" -mindepth 1 -maxdepth 1 -name 'loom-launch-*')
  [[ -z $left ]] || fail "round $round: session directories left behind: $left"
done
bases=$(grep -ho "mpi session base [^ ]*" "$tmp"/par*.out | sort -u | wc -l)
[[ $bases == 6 ]] || fail "6 launches shared session bases ($bases distinct)"
# A base the user gave Open MPI is kept: the launch's directory goes under it.
mkdir "$tmp/own"
out=$(OMPI_MCA_orte_tmpdir_base=$tmp/own timeout 120 "$loom" launch --nproc 2 --threads 1 \
      --cmd rank-info job.yaml 2>&1) || fail "launch under a given session base: $out"
expect_line "$out" "^rank 0 of 2: .*\| mpi session base $tmp/own/loom-launch-[A-Za-z0-9]{6} \|" \
  "the user's OMPI_MCA_orte_tmpdir_base"
[[ -z $(ls -A "$tmp/own") ]] || fail "left behind under the user's base: $(ls -A "$tmp/own")"

[[ $failures == 0 ]] || { echo "$failures failure(s)" >&2; exit 1; }
echo "OK"
