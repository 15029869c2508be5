#!/usr/bin/env bash
# `loom launch` when things go wrong: a failing rank is named and the status
# is non-zero; a SIGTERM to the launcher reaches the ranks (which stop cleanly)
# and a second one kills the job; a missing mpirun is reported.
# Usage: launch_failure.sh LOOM_BINARY TESTS_DATA_DIR
set -u
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
expect_line() { grep -Eq -- "$2" <<<"$1" || fail "$3: no line matching '$2' in:"$'\n'"$1"; }

# --- rank 1 fails --------------------------------------------------------------
timeout 120 "$loom" launch --nproc 2 --cmd rank-info job.yaml -- --fail-rank 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
err=$(cat "$tmp/err")
[[ $rc != 0 && $rc != 124 ]] || fail "a failing rank gave exit status $rc"
expect_line "$err" "rank-info: failing on rank 1 as asked" "the rank's own message"
expect_line "$err" "^loom launch: rank 1 failed \(exit code 1\); see its messages above$" "failing rank named"

# --- SIGTERM to the launcher: passed to the ranks, which stop cleanly --------------
# wait_started FILE: until both ranks have printed their line.
wait_started() {
  for _ in $(seq 200); do
    [[ $(grep -c "^rank [01] of 2" "$1") == 2 ]] && return 0
    sleep 0.1
  done
  fail "ranks did not start: $(cat "$1")"
}
marker="rank-info-sigterm-$$"
"$loom" launch --nproc 2 --cmd rank-info job.yaml -- --sleep-s 100 "$marker" >"$tmp/out2" 2>"$tmp/err2" &
launcher=$!
wait_started "$tmp/out2"
start=$(date +%s)
kill -TERM "$launcher"
wait "$launcher"
rc=$?
elapsed=$(( $(date +%s) - start ))
[[ $rc == 0 ]] || fail "graceful SIGTERM: expected status 0, got $rc: $(cat "$tmp/err2")"
(( elapsed < 20 )) || fail "SIGTERM took ${elapsed}s to stop the job"
expect_line "$(cat "$tmp/out2")" "^rank 0: stopping on signal 15$" "rank 0 got the signal"
expect_line "$(cat "$tmp/out2")" "^rank 1: stopping on signal 15$" "rank 1 got the signal"
expect_line "$(cat "$tmp/err2")" "passed Terminated to 2 rank\(s\)" "signal passed to the ranks"
expect_line "$(cat "$tmp/err2")" "job stopped on signal 15 \(Terminated\); every rank exited cleanly" "clean stop"

# --- ranks that ignore it: a second signal kills the job ---------------------------
marker2="rank-info-stubborn-$$"
"$loom" launch --nproc 2 --cmd rank-info job.yaml -- --sleep-s 100 --ignore-signals "$marker2" >"$tmp/out3" 2>"$tmp/err3" &
launcher=$!
wait_started "$tmp/out3"
start=$(date +%s)
kill -TERM "$launcher"
sleep 1
kill -0 "$launcher" 2>/dev/null || fail "the launcher exited although the ranks ignored the signal"
kill -TERM "$launcher"
wait "$launcher"
rc=$?
elapsed=$(( $(date +%s) - start ))
[[ $rc == 143 ]] || fail "second SIGTERM: expected status 143, got $rc: $(cat "$tmp/err3")"
(( elapsed < 20 )) || fail "the second SIGTERM took ${elapsed}s to stop the job"
sleep 1
for m in "$marker" "$marker2"; do
  if pgrep -f "$m" >/dev/null; then
    fail "ranks still running after the launcher returned: $(pgrep -af "$m")"
  fi
done

# --- no mpirun -------------------------------------------------------------------
out=$("$loom" launch --nproc 2 --mpirun /nonexistent/mpirun job.yaml 2>&1)
rc=$?
[[ $rc == 127 ]] || fail "missing mpirun: status $rc"
expect_line "$out" "cannot run /nonexistent/mpirun" "missing mpirun reported"

[[ $failures == 0 ]] || { echo "$failures failure(s)" >&2; exit 1; }
echo "OK"
