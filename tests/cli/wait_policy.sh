#!/usr/bin/env bash
# `loom` runs itself again with a short OpenMP spin (core/runtime.h,
# runtime_exec_with_wait_policy) unless the user chose the wait policy. The
# job file is a FIFO, so each loom blocks opening it and its environment can
# be read from /proc while it waits.
#   $1 = loom binary
set -euo pipefail
loom=$1
work=$(mktemp -d)
pid=
cleanup() {
  [[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
mkfifo "$work/job.yaml"

# spin_of ENV...: the GOMP_SPINCOUNT of a loom started with ENV, once it
# settles (empty: none after two seconds).
spin_of() {
  env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY "$@" "$loom" train "$work/job.yaml" >/dev/null 2>&1 &
  pid=$!
  local got=
  for _ in $(seq 20); do
    sleep 0.1
    got=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^GOMP_SPINCOUNT=//p')
    [[ -n $got ]] && break
  done
  kill -0 "$pid" 2>/dev/null || { echo "FAIL: loom exited instead of waiting for the job file"; exit 1; }
  # SIGKILL: loom turns SIGTERM into a graceful stop, which a blocked open() never reaches.
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
  echo "$got"
}

got=$(spin_of)
[[ $got =~ ^[0-9]+$ && $got -lt 300000 ]] ||
  { echo "FAIL: loom runs with GOMP_SPINCOUNT '$got', expected a count below libgomp's 300000"; exit 1; }
echo "default: GOMP_SPINCOUNT=$got"
got=$(spin_of GOMP_SPINCOUNT=77)
[[ $got == 77 ]] || { echo "FAIL: the user's GOMP_SPINCOUNT=77 became '$got'"; exit 1; }
got=$(spin_of OMP_WAIT_POLICY=active)
[[ -z $got ]] || { echo "FAIL: with OMP_WAIT_POLICY set, loom still set GOMP_SPINCOUNT=$got"; exit 1; }
echo "PASS: a short spin by default; the user's GOMP_SPINCOUNT and OMP_WAIT_POLICY are kept"
