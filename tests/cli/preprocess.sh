#!/usr/bin/env bash
# `loom preprocess` end to end: text (plain and .zst) -> token shards ->
# `loom train` on them, and the fixed-examples experiment on shards: dp 1, 2
# and 4 under mpirun with the global batch held constant give the same
# per-step losses (relative 1e-6).
#   $1 = loom binary, $2 = tests/data directory
set -euo pipefail
loom=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
tok=$data/tokenizers/wordpiece-multilingual-cased/tokenizer.json

"$loom" preprocess --help | grep -q -- "--sentence-order" || { echo "FAIL: --help"; exit 1; }
cp "$data/train/lm_train.jsonl" corpus.jsonl
zstd -q corpus.jsonl -o corpus2.jsonl.zst
"$loom" preprocess --tokenizer "$tok" --input corpus.jsonl --input corpus2.jsonl.zst \
  --output shards --task masked-lm --max-seq-length 32 --shard-mb 0.001 > pp.log
cat pp.log
grep -q "320 documents -> 320 sequences" pp.log || { echo "FAIL: unexpected counts"; exit 1; }
[[ $(ls shards/shard-*.bin | wc -l) -gt 1 ]] || { echo "FAIL: expected several shards"; exit 1; }
if "$loom" preprocess --tokenizer "$tok" --input corpus.jsonl --output shards 2> again.err; then
  echo "FAIL: writing into an existing shard folder should fail"; exit 1
fi
grep -q "index.json" again.err || { echo "FAIL: error does not name index.json"; cat again.err; exit 1; }

cat > job.yaml <<YAML
model: {config: $data/train/tiny-bert.json, tokenizer: $tok}
task: masked-lm
data: {train: $work/shards, max_seq_length: 32}
hyperparameters:
  output_dir: out
  overwrite_output_dir: true
  max_steps: 8
  per_device_train_batch_size: 16
  learning_rate: 1.0e-2
  logging_steps: 1
  save_strategy: 'no'
  seed: 7
YAML
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
"$loom" train job.yaml --quiet --set hyperparameters.output_dir=dp1
if ! command -v mpirun >/dev/null; then
  echo "SKIP: no mpirun (Debian openmpi-bin): dp runs on shards not checked"; exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for n in 2 4; do
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np $n "$loom" train job.yaml --quiet \
    --set hyperparameters.output_dir=dp$n \
    --set hyperparameters.per_device_train_batch_size=$((16 / n))
done
python3 - <<'PY'
import json
def losses(d):
    return [r["loss"] for r in map(json.loads, open(d + "/metrics.jsonl")) if "loss" in r]
ref = losses("dp1")
assert len(ref) == 8, ref
for d in ("dp2", "dp4"):
    other = losses(d)
    worst = max(abs(a - b) / abs(a) for a, b in zip(ref, other))
    print(f"{d}: worst relative loss difference to dp1 {worst:.2e}")
    assert len(other) == 8 and worst < 1e-6, d
PY
