#!/usr/bin/env bash
# One BERT-base-shaped training step (forward, backward, AdamW; batch 8 x 128,
# fp32, no dropout) in Loom and in PyTorch, side by side in one run and in the
# same environment: OPENBLAS_CORETYPE unset (it halves OpenBLAS, which PyTorch
# uses here) and glibc's malloc thresholds raised (first touch of fresh pages is
# very slow on these machines); only the OpenMP wait policy differs, each peer
# getting its faster one (bench/torch_peer.sh). Prints both JSON lines and the ratio.
#   bench/bert_step_vs_torch.sh [BUILD_DIR] [--task mlm|cls] [--steps N] ...
# Extra options go to both sides.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/cpu-release}
shift || true
bin="$build/bench/bench_model_step"
[[ -x $bin ]] || { echo "bert_step_vs_torch.sh: build bench_model_step first: cmake --build $build --target bench_model_step" >&2; exit 2; }
python=/usr/bin/python3
"$python" -c 'import torch' 2>/dev/null || { echo "bert_step_vs_torch.sh: needs Debian's python3-torch (LOOM_WITH_TORCH=1 scripts/install_deps.sh)" >&2; exit 2; }
# OpenMP wait policy: Loom runs under the default, PyTorch under whichever of
# default and passive is faster for it (bench/torch_peer.sh).
unset OPENBLAS_CORETYPE OMP_WAIT_POLICY
source "$root/bench/torch_peer.sh"
export MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), cores: $(nproc)"
loom=$("$bin" "$@" | tail -1)
torch=$(torch_best "$@")
echo "$loom"
echo "$torch"
"$python" - "$loom" "$torch" <<'PY'
import json, sys
l, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"loom {l['ms_per_step']:.0f} ms/step, pytorch {t['ms_per_step']:.0f} ms/step: "
      f"loom is {t['ms_per_step'] / l['ms_per_step']:.2f}x faster ({l['gflops']:.0f} vs {t['gflops']:.0f} GFLOP/s)")
PY
