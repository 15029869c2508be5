#!/usr/bin/env bash
# Restarts through the real `loom train`: one job file starts a run and
# continues it.
#   - the first half on 1 rank, then the same job file on 2 ranks (mpirun,
#     per-device batch halved: the same global batch) resumes from the newest
#     checkpoint and ends with the uninterrupted run's losses and parameters;
#   - on 2 ranks with the per-device batch unchanged (another global batch) it
#     is another job: refused, naming the key and both values;
#   - run again after it finished: nothing left to train, the log unchanged.
#   $1 = loom binary, $2 = tests/data directory
source "$(dirname "$0")/lib/layouts.sh" "$@"
fail() { echo "FAIL: $*" >&2; exit 1; }
# A constant learning rate, so a run cut at step 4 and one planned for 8 steps
# take the same steps.
cat > restart.yaml <<YAML
model: {config: $data/train/tiny-bert.json, tokenizer: $data/tokenizers/wordpiece-multilingual-cased/tokenizer.json}
task: masked-lm
data: {train: $data/train/lm_train.jsonl, max_seq_length: 32}
hyperparameters:
  output_dir: out
  max_steps: 8
  per_device_train_batch_size: 8
  learning_rate: 1.0e-2
  lr_scheduler_type: constant
  logging_steps: 1
  save_strategy: steps
  save_steps: 4
  seed: 7
YAML

echo "== uninterrupted: 8 steps on 1 rank"
"$loom" train restart.yaml --quiet --threads 1 --set hyperparameters.output_dir=full

echo "== 4 steps on 1 rank, then the same job file on 2 ranks"
"$loom" train restart.yaml --threads 1 --set hyperparameters.output_dir=run \
    --set hyperparameters.max_steps=4 > first.log 2>&1 || { cat first.log; exit 1; }
grep -q "starting fresh: no complete checkpoint in $PWD/run" first.log ||
  { cat first.log; fail "the first run did not say it starts fresh"; }
cp -r run other
mpi 2 "$loom" train restart.yaml --set hyperparameters.output_dir=run \
    --set hyperparameters.per_device_train_batch_size=4 > second.log 2>&1 || { cat second.log; exit 1; }
grep -q "resuming from checkpoint-4 (found in output_dir; same job)" second.log ||
  { cat second.log; fail "the restart on 2 ranks did not resume checkpoint-4"; }
compare full run

echo "== 2 ranks with 8 per device: another global batch, another job"
set +e
mpi 2 "$loom" train restart.yaml --set hyperparameters.output_dir=other > refused.log 2>&1
rc=$?
set -e
[[ $rc != 0 ]] || { cat refused.log; fail "another job's checkpoint was resumed"; }
grep -q "hyperparameters.global_train_batch_size: 8 (checkpoint) vs 16 (this job)" refused.log ||
  { cat refused.log; fail "the refusal does not name the global batch"; }
[[ ! -d other/checkpoint-8 ]] || fail "the refused job trained"

echo "== run again after it finished (1 rank again)"
"$loom" train restart.yaml --threads 1 --set hyperparameters.output_dir=run > third.log 2>&1 ||
  { cat third.log; exit 1; }
grep -q "resuming from checkpoint-8 (found in output_dir; same job)" third.log ||
  { cat third.log; fail "the finished run was not found"; }
grep -q "the run had already finished" third.log || { cat third.log; fail "no finished note"; }
compare full run
echo "train_restart: ok"
