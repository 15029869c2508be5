#!/usr/bin/env bash
# One training step (forward, backward, AdamW) of a Llama-shaped causal LM of
# about 100M parameters (hidden 768, 8 layers, 12 query and 4 key/value heads,
# SwiGLU 2048, vocabulary 32000, untied head; batch 8 x 128) in Loom and in
# PyTorch (bench/torch_llama_step.py: transformers 4.40's Llama math in plain
# torch), side by side in one run and in the same environment, as
# bert_step_vs_torch.sh does for BERT. Prints both JSON lines and the ratio.
#   bench/llama_step_vs_torch.sh [BUILD_DIR] [--dtype fp32|bf16] [--steps N] ...
# Extra options go to both sides. PyTorch 1.13's bf16 step on a CPU without
# AVX-512 BF16 takes minutes: its peer stops warming up and timing after a
# 300 s budget (keeping one timed step) and reports "steps_timed".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/cpu-release}
shift || true
bin="$build/bench/bench_model_step"
[[ -x $bin ]] || { echo "llama_step_vs_torch.sh: build bench_model_step first: cmake --build $build --target bench_model_step" >&2; exit 2; }
python=/usr/bin/python3
"$python" -c 'import torch' 2>/dev/null || { echo "llama_step_vs_torch.sh: needs Debian's python3-torch (LOOM_WITH_TORCH=1 scripts/install_deps.sh)" >&2; exit 2; }
unset OPENBLAS_CORETYPE OMP_WAIT_POLICY
peer_script=torch_llama_step.py
source "$root/bench/torch_peer.sh"
export MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824
shape=(--layers 8 --hidden 768 --heads 12 --kv-heads 4 --intermediate 2048 --vocab 32000)
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), cores: $(nproc)"
loom=$("$bin" --task clm "${shape[@]}" "$@" | tail -1)
torch=$(torch_best "${shape[@]}" "$@")
echo "$loom"
echo "$torch"
"$python" - "$loom" "$torch" <<'PY'
import json, sys
l, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"llama {t.get('params', 0) / 1e6:.0f}M {l['dtype']}: loom {l['ms_per_step']:.0f} ms/step, "
      f"pytorch {t['ms_per_step']:.0f} ms/step: loom is {t['ms_per_step'] / l['ms_per_step']:.2f}x "
      f"faster ({l['gflops']:.0f} vs {t['gflops']:.0f} GFLOP/s)")
PY
