#!/usr/bin/env bash
# examples/albert_shards keeps working: its job file trains a few LAMB steps
# on sentence-order shards made from Debian's fortunes, and the loss falls.
#   $1 = loom binary, $2 = tests/data directory
set -euo pipefail
loom=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
[[ -d /usr/share/games/fortunes ]] || { echo "SKIP: Debian's fortunes are not installed"; exit 0; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$root/examples/albert_shards" "$root/examples/fortunes" "$work/"
rm -rf "$work/albert_shards/data" "$work/albert_shards/out"
cd "$work/albert_shards"
python3 ../fortunes/prepare_fortunes.py data >/dev/null
"$loom" preprocess --tokenizer ../fortunes/tokenizer.json --input data/pretrain.txt \
  --output data/shards --task masked-lm --sentence-order --max-seq-length 128 --sample-by line
"$loom" train pretrain.yaml --quiet --set hyperparameters.max_steps=12 \
  --set hyperparameters.logging_steps=1 --set hyperparameters.save_strategy=no \
  --set hyperparameters.per_device_train_batch_size=8
python3 - <<'PY'
import json
losses = [r["loss"] for r in map(json.loads, open("out/pretrain/metrics.jsonl")) if "loss" in r]
print("losses", [round(x, 3) for x in losses])
assert len(losses) == 12
assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3, "loss did not fall"
PY
