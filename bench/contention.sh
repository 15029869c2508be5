#!/usr/bin/env bash
# The BERT-base-shaped training step (bench/bert_step_vs_torch.sh: forward,
# backward, AdamW, batch 8 x 128, fp32 unless told) in Loom and in PyTorch when
# the machine is not Loom's alone. Both peers run in their best environment, as
# in bert_step_vs_torch.sh (Loom under libgomp's default wait policy, PyTorch
# under the faster of default and passive), under three conditions:
#   quiet  nothing else runs (check the load average printed with each round);
#   busy   one ordinary process at the same priority keeps a core busy
#          (a shell busy loop, started and killed here);
#   quota  the peer runs in a cgroup whose CPU bandwidth is QUOTA_CPUS cores
#          (default: one fewer than the machine has) while it still starts one
#          thread per core, as in a container with a CPU limit; where no cgroup
#          can be made, taskset to QUOTA_CPUS cores with OMP_NUM_THREADS forced
#          to the core count instead (the label says which ran).
# Why: OpenMP threads that spin at barriers lose whole time slices when a core
# is taken, so a step that wins on a quiet machine can lose on a shared one.
# The conditions are interleaved for ROUNDS rounds (default 3; use 7+ when a
# margin is near 10%); each cell is the median step with the rounds in brackets.
# How to read it: "pytorch/loom" above 1 means Loom is faster; "loom vs quiet"
# is Loom's step under contention over its quiet step (a fair share of half
# the cores would give about 2x on two cores, 1.5x with a busy loop on two).
# Without PyTorch (LOOM_WITH_TORCH=1 scripts/install_deps.sh) it prints Loom's
# figures only and says so.
#   bench/contention.sh [BUILD_DIR] [--task cls|mlm] [--steps N] [--layers N] ...
# Extra options go to both sides; the default is --task cls --warmup 1 --steps 3.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/cpu-release}
shift || true
[[ $# -gt 0 ]] || set -- --task cls --warmup 1 --steps 3
bin="$build/bench/bench_model_step"
[[ -x $bin ]] || { echo "contention.sh: build bench_model_step first: cmake --build $build --target bench_model_step" >&2; exit 2; }
rounds=${ROUNDS:-3}
cores=$(nproc)
quota_cpus=${QUOTA_CPUS:-$((cores > 1 ? cores - 1 : 1))}
python=${PYTHON:-/usr/bin/python3}  # Debian's, where python3-torch installs
have_torch=1
"$python" -c 'import torch' 2>/dev/null || {
  have_torch=0
  echo "contention.sh: no PyTorch ($python cannot import torch; LOOM_WITH_TORCH=1 scripts/install_deps.sh): Loom's figures only"
}
unset OPENBLAS_CORETYPE OMP_WAIT_POLICY GOMP_SPINCOUNT
source "$root/bench/torch_peer.sh"
export MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824

busy=
cgroup=
cleanup() {
  [[ -n $busy ]] && kill "$busy" 2>/dev/null && wait "$busy" 2>/dev/null
  [[ -n $cgroup ]] && rmdir "$cgroup" 2>/dev/null
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The quota condition: a cgroup (v2 cpu.max, else v1 cfs quota) if one can be
# made here, else taskset.
quota_kind=taskset
period=100000
if [[ -w /sys/fs/cgroup/cgroup.subtree_control ]] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null &&
  mkdir "/sys/fs/cgroup/loom-contention.$$" 2>/dev/null; then
  cgroup=/sys/fs/cgroup/loom-contention.$$
  if echo "$((quota_cpus * period)) $period" >"$cgroup/cpu.max" 2>/dev/null; then quota_kind=cgroup2; else rmdir "$cgroup"; cgroup=; fi
elif [[ -d /sys/fs/cgroup/cpu ]] && mkdir "/sys/fs/cgroup/cpu/loom-contention.$$" 2>/dev/null; then
  cgroup=/sys/fs/cgroup/cpu/loom-contention.$$
  if echo $period >"$cgroup/cpu.cfs_period_us" && echo $((quota_cpus * period)) >"$cgroup/cpu.cfs_quota_us"; then
    quota_kind=cgroup1
  else
    rmdir "$cgroup"
    cgroup=
  fi
fi
case $quota_kind in
  cgroup*) quota_label="quota (cgroup: $quota_cpus of $cores cores, $cores threads)" ;;
  taskset) quota_label="quota (taskset to $quota_cpus of $cores cores, $cores threads)" ;;
esac

# run CONDITION CMD...: CMD under the condition's limits (busy needs none here).
run() {
  local cond=$1
  shift
  if [[ $cond == quota ]]; then
    if [[ -n $cgroup ]]; then
      (echo "$BASHPID" >"$cgroup/cgroup.procs" && "$@")
    else
      (taskset -cp "0-$((quota_cpus - 1))" "$BASHPID" >/dev/null && export OMP_NUM_THREADS=$cores && "$@")
    fi
  else
    "$@"
  fi
}
loom_step() { "$bin" "$@" | tail -1; }

echo "cores: $cores, rounds: $rounds, options: $*, quota condition: $quota_kind"
results=()
for r in $(seq 1 "$rounds"); do
  for cond in quiet busy quota; do
    if [[ $cond == busy ]]; then
      sh -c 'while :; do :; done' &
      busy=$!
    fi
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    loom=$(run "$cond" loom_step "$@")
    torch=null
    [[ $have_torch == 1 ]] && torch=$(run "$cond" torch_best "$@")
    if [[ -n $busy ]]; then
      kill "$busy"
      wait "$busy" 2>/dev/null || true
      busy=
    fi
    echo "round $r $cond (load average before: $load): loom $(sed 's/.*"ms_per_step": \([0-9.]*\).*/\1/' <<<"$loom") ms" \
      "$([[ $torch != null ]] && sed 's/.*"ms_per_step": \([0-9.]*\).*"omp_wait_policy": "\([a-z]*\)".*/pytorch \1 ms (\2)/' <<<"$torch")"
    results+=("{\"cond\": \"$cond\", \"loom\": $loom, \"torch\": $torch}")
  done
done

"$python" - "$quota_label" "${results[@]}" <<'PY'
import json, statistics, sys
quota_label, rows = sys.argv[1], [json.loads(a) for a in sys.argv[2:]]
labels = {"quiet": "quiet", "busy": "busy (one core busy, same priority)", "quota": quota_label}
def cell(cond, peer):
    ms = [r[peer]["ms_per_step"] for r in rows if r["cond"] == cond and r[peer]]
    return (statistics.median(ms), ms) if ms else (None, [])
have_torch = any(r["torch"] for r in rows)
print()
print((f"{'condition':<44} {'loom ms/step [rounds]':<34} " +
      (f"{'pytorch ms/step [rounds]':<34} {'pytorch/loom':>12}" if have_torch else "")).rstrip())
quiet = cell("quiet", "loom")[0]
for cond in ("quiet", "busy", "quota"):
    lm, lr = cell(cond, "loom")
    line = f"{labels[cond]:<44} {lm:>7.0f} [{', '.join(f'{x:.0f}' for x in lr)}]".ljust(79)
    if have_torch:
        tm, tr = cell(cond, "torch")
        pol = sorted({r["torch"]["omp_wait_policy"] for r in rows if r["cond"] == cond and r["torch"]})
        line += f" {tm:>7.0f} [{', '.join(f'{x:.0f}' for x in tr)}] ({'/'.join(pol)})".ljust(35)
        line += f" {tm / lm:>11.2f}x"
    print(line.rstrip())
for cond in ("busy", "quota"):
    print(f"loom {cond} / loom quiet: {cell(cond, 'loom')[0] / quiet:.2f}x")
if not have_torch:
    print("(no PyTorch here: Loom's figures only)")
PY
