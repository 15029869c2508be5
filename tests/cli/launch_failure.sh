#!/usr/bin/env bash
# `loom launch` when things go wrong: a failing rank is named and the status
# is non-zero; SIGTERM to the launcher stops every rank promptly; a missing
# mpirun is reported.
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

# --- SIGTERM to the launcher ---------------------------------------------------
marker="rank-info-sigterm-$$"
"$loom" launch --nproc 2 --cmd rank-info job.yaml -- --sleep-s 100 "$marker" >"$tmp/out2" 2>"$tmp/err2" &
launcher=$!
for _ in $(seq 100); do  # until both ranks have started
  [[ $(grep -c "^rank " "$tmp/out2") == 2 ]] && break
  sleep 0.1
done
start=$(date +%s)
kill -TERM "$launcher"
wait "$launcher"
rc=$?
elapsed=$(( $(date +%s) - start ))
[[ $rc == 143 ]] || fail "SIGTERM: expected status 143, got $rc: $(cat "$tmp/err2")"
(( elapsed < 20 )) || fail "SIGTERM took ${elapsed}s to stop the job"
expect_line "$(cat "$tmp/err2")" "^loom launch: stopped the job on signal 15" "signal reported"
sleep 1
if pgrep -f "$marker" >/dev/null; then
  fail "ranks still running after SIGTERM: $(pgrep -af "$marker")"
fi

# --- no mpirun -------------------------------------------------------------------
out=$("$loom" launch --nproc 2 --mpirun /nonexistent/mpirun job.yaml 2>&1)
rc=$?
[[ $rc == 127 ]] || fail "missing mpirun: status $rc"
expect_line "$out" "cannot run /nonexistent/mpirun" "missing mpirun reported"

[[ $failures == 0 ]] || { echo "$failures failure(s)" >&2; exit 1; }
echo "OK"
