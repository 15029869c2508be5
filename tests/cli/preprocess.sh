#!/usr/bin/env bash
# `loom preprocess` end to end: text (plain and .zst) -> token shards ->
# `loom train` on them, and the fixed-examples experiment on shards: dp 1, 2
# and 4 under mpirun with the global batch held constant give the same
# per-step losses (relative 1e-6), from local shards and from the same shards
# streamed out of an S3 bucket (s3rver on loopback, uploaded with s3cmd).
#   $1 = loom binary, $2 = tests/data directory
set -euo pipefail
loom=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$(cd "$2" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
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

# Plain text: one document per line by default, as loom train reads it.
printf 'The first line.\nThe second line.\nA third.\n' > lines.txt
"$loom" preprocess --tokenizer "$tok" --input lines.txt --output text-shards \
  --task masked-lm --max-seq-length 32 > text.log
grep -q "3 documents" text.log || { echo "FAIL: lines.txt is not 3 documents"; cat text.log; exit 1; }
grep -qF "plain text (1 file(s)): one document per line (--sample-by line)" text.log ||
  { echo "FAIL: no sample-by line in the log"; cat text.log; exit 1; }
"$loom" preprocess --tokenizer "$tok" --input lines.txt --output para-shards \
  --task masked-lm --max-seq-length 32 --sample-by paragraph > para.log
grep -q "1 documents" para.log || { echo "FAIL: --sample-by paragraph"; cat para.log; exit 1; }
cat > text.yaml <<YAML
model: {config: $data/train/tiny-bert.json, tokenizer: $tok}
task: masked-lm
data: {train: $work/lines.txt, max_seq_length: 32}
hyperparameters: {output_dir: text-out, max_steps: 1, save_strategy: 'no'}
YAML
"$loom" train text.yaml --threads 1 > train-text.log 2>&1 || { cat train-text.log; exit 1; }
grep -qF "data.train: plain text, one record per line (data.sample_by: line)" train-text.log ||
  { echo "FAIL: no sample_by line in the training log"; cat train-text.log; exit 1; }
grep -q "train data: 3 records" train-text.log ||
  { echo "FAIL: lines.txt is not 3 training records"; cat train-text.log; exit 1; }

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
runs="dp2 dp4"
source "$root/tests/cli/lib/s3rver.sh"
trap 's3_stop; rm -rf "$work"' EXIT
if s3_start corpus; then
  s3 put --recursive shards/ s3://corpus/shards/
  for n in 1 2 4; do
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np $n "$loom" train job.yaml --quiet \
      --set data.train=s3://corpus/shards --set hyperparameters.output_dir=s3dp$n \
      --set hyperparameters.per_device_train_batch_size=$((16 / n))
  done
  runs="$runs s3dp1 s3dp2 s3dp4"
else
  echo "note: the streamed-shards runs are skipped: $s3_why"
fi
RUNS=$runs python3 - <<'PY'
import json, os
def losses(d):
    return [r["loss"] for r in map(json.loads, open(d + "/metrics.jsonl")) if "loss" in r]
ref = losses("dp1")
assert len(ref) == 8, ref
for d in os.environ["RUNS"].split():
    other = losses(d)
    worst = max(abs(a - b) / abs(a) for a, b in zip(ref, other))
    print(f"{d}: worst relative loss difference to dp1 {worst:.2e}")
    assert len(other) == 8 and worst < 1e-6, d
PY
