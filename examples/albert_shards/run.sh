#!/usr/bin/env bash
# ALBERT-style pretraining on token shards, end to end:
#   1. Debian's fortunes as text (../fortunes/prepare_fortunes.py),
#   2. `loom preprocess --sentence-order` into token shards,
#   3. `loom train pretrain.yaml` (LAMB, masked LM on the shards).
# Usage: examples/albert_shards/run.sh [path/to/loom]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
loom=${1:-$root/build/cpu-release/loom}
[[ -x $loom ]] || { echo "build loom first (scripts/test or cmake --build build/cpu-release)" >&2; exit 2; }
cd "$here"
python3 ../fortunes/prepare_fortunes.py data >/dev/null
rm -rf data/shards
"$loom" preprocess --tokenizer ../fortunes/tokenizer.json --input data/pretrain.txt \
  --output data/shards --task masked-lm --sentence-order --max-seq-length 128 --sample-by line
"$loom" train pretrain.yaml
