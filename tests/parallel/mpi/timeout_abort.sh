#!/usr/bin/env bash
# One rank skips an all_reduce: the waiting rank must name itself, the
# collective and the group, and the job must end (MPI_Abort) within seconds of
# the 2 s timeout instead of hanging.
#   $1 = mpirun, $2 = test_parallel_mpi
set -u
mpirun=$1 bin=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
timeout 90 "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$bin" --scenario=skip-collective >"$log" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
cat "$log"
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ $rc -ne 124 ]] || fail "the job hung (killed by timeout after 90 s)"
[[ $rc -ne 0 ]] || fail "the job exited 0 although a collective timed out"
grep -q "rank 0 (world rank 0) timed out after 2\.[0-9] s waiting in all_reduce(sum, 1024 x f32) on group 'world'" "$log" \
  || fail "no timeout report naming rank 0, all_reduce and the group"
# MPI_Abort's error code (3) becomes mpirun's exit status. (Open MPI's own
# "MPI_ABORT was invoked" banner is not checked: it is sometimes lost.)
[[ $rc -eq 3 ]] || fail "expected exit status 3 from MPI_Abort, got $rc"
(( elapsed < 30 )) || fail "took ${elapsed}s to abort after a 2 s timeout"
echo "OK: aborted after ${elapsed}s with exit code $rc"
