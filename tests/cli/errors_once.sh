#!/usr/bin/env bash
# Errors under mpirun are printed once per job, not once per rank:
#   - a bad job file or a malformed data file fails every rank: one line;
#   - a job that fails on rank 1 only (mpirun's MPMD form gives it another
#     job file) is still reported, by rank 1, naming itself;
#   - one that fails on rank 0 only is reported by rank 0;
#   - different errors on different ranks are each reported;
#   - distribution.mpi.processes_per_host is checked against the ranks on the
#     host (an error, once, when they differ; a note when they agree).
# Usage: errors_once.sh LOOM_BINARY TESTS_DATA_DIR
set -u
loom=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$(cd "$2" && pwd)
if ! command -v mpirun >/dev/null; then
  echo "SKIP: no mpirun (Debian openmpi-bin)"; exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
  OMP_WAIT_POLICY=passive
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
mpi() { timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none "$@"; }
# count FILE TEXT: lines of FILE holding TEXT (fixed string).
count() { grep -cF -- "$2" "$1"; }
# expect_once FILE TEXT WHAT
expect_once() {
  local n
  n=$(count "$1" "$2")
  [[ $n == 1 ]] || fail "$3: '$2' printed $n times in:"$'\n'"$(cat "$1")"
}

cat > good.yaml <<YAML
model: {config: $data/train/tiny-bert.json, tokenizer: $data/tokenizers/wordpiece-multilingual-cased/tokenizer.json}
task: masked-lm
data: {train: $data/train/lm_train.jsonl, max_seq_length: 32}
hyperparameters: {output_dir: out, max_steps: 1, per_device_train_batch_size: 4, save_strategy: 'no'}
YAML
sed 's/max_steps: 1/epochs: 1/' good.yaml > badkey.yaml
sed 's/max_steps: 1/lr: 1/' good.yaml > badkey2.yaml
printf '{"text": "fine"}\n{"text": broken\n' > bad.jsonl
sed "s|$data/train/lm_train.jsonl|$work/bad.jsonl|" good.yaml > baddata.yaml

echo "== a bad key on both ranks"
mpi -np 2 "$loom" train badkey.yaml --quiet > o1 2>&1 && fail "a bad job succeeded"
expect_once o1 "unknown key 'epochs' in hyperparameters; did you mean 'num_train_epochs'?" \
  "bad key on every rank"
grep -q "^loom: error: badkey.yaml:4: unknown key 'epochs'" o1 || fail "rank 0 does not print it: $(cat o1)"

echo "== malformed data on both ranks"
mpi -np 2 "$loom" train baddata.yaml --quiet > o2 2>&1 && fail "bad data succeeded"
expect_once o2 "$work/bad.jsonl:2" "bad data on every rank"

echo "== a bad job on rank 1 only"
mpi -np 1 "$loom" train good.yaml --quiet : -np 1 "$loom" train badkey.yaml --quiet > o3 2>&1 &&
  fail "a job with a failing rank succeeded"
expect_once o3 "unknown key 'epochs'" "rank 1's own failure"
grep -q "^loom: error (rank 1): badkey.yaml:4: unknown key 'epochs'" o3 ||
  fail "rank 1 does not name itself: $(cat o3)"

echo "== a bad job on rank 0 only"
mpi -np 1 "$loom" train badkey.yaml --quiet : -np 1 "$loom" train good.yaml --quiet > o4 2>&1 &&
  fail "a job with a failing rank succeeded"
expect_once o4 "unknown key 'epochs'" "rank 0's own failure"

echo "== different errors on the two ranks"
mpi -np 1 "$loom" train badkey.yaml --quiet : -np 1 "$loom" train badkey2.yaml --quiet > o5 2>&1 &&
  fail "two failing ranks succeeded"
expect_once o5 "unknown key 'epochs'" "rank 0's error"
expect_once o5 "unknown key 'lr' in hyperparameters; did you mean 'learning_rate'?" \
  "rank 1's other error"

echo "== processes_per_host against the ranks on this host"
mpi -np 2 "$loom" train good.yaml --set distribution.mpi.processes_per_host=4 > o6 2>&1 &&
  fail "processes_per_host 4 on 2 ranks succeeded"
expect_once o6 "distribution.mpi.processes_per_host is 4, but this run has 2 rank(s) on this host" \
  "processes_per_host mismatch"
mpi -np 2 "$loom" train good.yaml --set distribution.mpi.processes_per_host=2 > o7 2>&1 ||
  fail "processes_per_host 2 on 2 ranks failed: $(cat o7)"
expect_once o7 "distribution.mpi.processes_per_host 2: ranks are started by the launcher" \
  "processes_per_host note"
expect_once o7 "precision: fp32 (hyperparameters.bf16 and fp16 are off)" "precision note"

[[ $failures == 0 ]] || { echo "$failures failure(s)" >&2; exit 1; }
echo "OK"
