#!/usr/bin/env bash
# `loom preprocess --output s3://...`: the shards are staged locally and
# uploaded (byte for byte what a local --output writes, index.json included),
# nothing is left in the staging folder or in a local folder named "s3:", and
# `loom train` from that URI gives the losses of the local shards (1 rank, and
# 2 ranks under mpirun with the same global batch). A prefix that already
# holds a shard folder or other objects, and malformed URIs, are refused with
# errors naming them; shards of an upload that stopped before index.json are
# replaced.
#   $1 = loom binary, $2 = tests/data directory
set -euo pipefail
loom=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib/s3rver.sh"
work=$(mktemp -d)
trap 's3_stop; rm -rf "$work"' EXIT
cd "$work"
s3_start corpus || { echo "SKIP: $s3_why"; exit 0; }
export LOOM_CACHE_DIR=$work/cache
fail() { echo "FAIL: $*"; exit 1; }
tok=$data/tokenizers/wordpiece-multilingual-cased/tokenizer.json
pp() { "$loom" preprocess --tokenizer "$tok" --input "$data/train/lm_train.jsonl" \
         --task masked-lm --max-seq-length 32 --shard-mb 0.001 "$@"; }

pp --output shards > local.log
pp --output s3://corpus/lm/shards > s3.log
cat s3.log
n=$(ls shards | wc -l)
grep -q "^wrote s3://corpus/lm/shards (uploaded $n files): 160 documents" s3.log ||
  fail "the summary does not say where $n files went"
[[ ! -e s3: ]] || fail "a local folder named s3: was written"
[[ -z $(ls -A cache/preprocess 2>/dev/null) ]] || fail "staging folder left: $(ls cache/preprocess)"
mkdir back
s3 get --recursive s3://corpus/lm/shards/ back/
diff -r shards back || fail "uploaded shards differ from a local --output"

if pp --output s3://corpus/lm/shards > again.log 2>&1; then fail "wrote over existing shards"; fi
grep -qF "already holds a shard folder (s3://corpus/lm/shards/index.json)" again.log ||
  fail "existing shard folder: $(cat again.log)"
# An upload that stopped before index.json is replaced by a new run.
s3 del s3://corpus/lm/shards/index.json
pp --output s3://corpus/lm/shards > resumed.log || fail "a stopped upload was not replaced"
s3 put "$data/train/lm_eval.jsonl" s3://corpus/other/notes.jsonl
if pp --output s3://corpus/other > other.log 2>&1; then fail "wrote among other objects"; fi
grep -qF "holds other objects (s3://corpus/other/notes.jsonl)" other.log ||
  fail "prefix with other objects: $(cat other.log)"
bad() {  # OUTPUT EXPECTED-MESSAGE-PART
  if pp --output "$1" > bad.log 2>&1; then fail "--output $1 accepted"; fi
  grep -qF -- "$2" bad.log || fail "--output $1: expected '$2' in: $(cat bad.log)"
}
bad gs://corpus/x "--output: 'gs://corpus/x': unsupported scheme 'gs'"
bad s3:// "--output: 's3://': an s3:// URI needs a bucket"
bad https://example.invalid/x "http(s) URLs can only be read"
bad s3:/corpus/x "looks like a URI without its '//'"
[[ ! -e s3: && ! -e gs: ]] || fail "a malformed URI became a local folder"

cat > job.yaml <<YAML
model: {config: $data/train/tiny-bert.json, tokenizer: $tok}
task: masked-lm
data: {train: $work/shards, max_seq_length: 32}
hyperparameters:
  output_dir: out
  overwrite_output_dir: true
  max_steps: 4
  per_device_train_batch_size: 8
  learning_rate: 1.0e-2
  logging_steps: 1
  save_strategy: 'no'
  seed: 7
YAML
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
"$loom" train job.yaml --quiet --set hyperparameters.output_dir=local
"$loom" train job.yaml --quiet --set hyperparameters.output_dir=remote \
  --set data.train=s3://corpus/lm/shards
runs=remote
if command -v mpirun >/dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$loom" train job.yaml --quiet \
    --set hyperparameters.output_dir=remote2 --set data.train=s3://corpus/lm/shards \
    --set hyperparameters.per_device_train_batch_size=4
  runs="$runs remote2"
fi
# The same losses (and final parameters) as from the local shards.
for run in $runs; do
  python3 "$here/compare_runs.py" local "$run" 1e-6 1e-4
  [[ $(grep -c '"loss"' "$run/metrics.jsonl") == 4 ]] || fail "$run: not 4 logged steps"
done
