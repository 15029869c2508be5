#!/usr/bin/env bash
# `loom sagemaker`: SageMaker's training-container contract, in a temporary
# /opt/ml tree (LOOM_SAGEMAKER_ROOT), with hyperparameters written the way the
# SageMaker SDK writes them (every value JSON-encoded) for the BERT
# transaction-classification estimator (entry_point train.py, ml.p3.16xlarge,
# distribution smdistributed.dataparallel) and a base job file in the code
# folder; the tiny BERT config as the model, a CSV train channel and a JSONL
# eval channel.
#   - the run trains exactly what the equivalent job file trains (the same
#     per-step losses), the model lands in the model folder, metrics.jsonl in
#     output/data, checkpoints in checkpoints/;
#   - the metric_definitions regexes of docs/sagemaker.md read the train and
#     eval losses from the log, equal to metrics.jsonl's;
#   - a SIGTERM inside a step (as a spot interruption sends): exit 75, no
#     failure file; the same job again (started as `loom train`, what
#     SageMaker runs when the image's entry point is `loom`) resumes from
#     checkpoints/ and ends with the uninterrupted losses;
#   - bad hyperparameters: the failure file names the hyperparameter and
#     what was expected, as for a job file;
#   - the SM_* variables (SM_HPS, SM_CHANNEL_TRAIN, SM_MODEL_DIR,
#     SM_OUTPUT_DATA_DIR) instead of the files;
#   - two hosts (127.0.0.2 and 127.0.0.3 through Open MPI's rsh agent, as in
#     launch_hosts.sh): the leader starts the ranks across SM_HOSTS, the other
#     host waits until the job has run on it, and the losses equal the
#     1-rank run with the same global batch.
#   $1 = loom binary, $2 = tests/data directory
source "$(dirname "$0")/lib/layouts.sh" "$@"
fail() { echo "FAIL: $*" >&2; exit 1; }
unset OMPI_MCA_rmaps_base_oversubscribe
unset $(env | sed -n 's/^\(SM_[A-Z_]*\)=.*/\1/p')

# make_tree ROOT HPS_JSON [HOSTS_JSON CURRENT_HOST]: the /opt/ml tree SageMaker builds.
make_tree() {
  python3 - "$data" "$@" <<'PY'
import csv, json, os, shutil, sys
data, root, hps = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
hosts = json.loads(sys.argv[4]) if len(sys.argv) > 4 else ["algo-1"]
current = sys.argv[5] if len(sys.argv) > 5 else "algo-1"
for d in ("input/config", "input/data/train", "input/data/eval", "code", "model", "output"):
    os.makedirs(f"{root}/{d}", exist_ok=True)
rows = [json.loads(l) for l in open(f"{data}/train/cls_train.jsonl")]
with open(f"{root}/input/data/train/transactions.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["text", "label"])
    w.writerows([r["text"], r["label"]] for r in rows)
shutil.copy(f"{data}/train/cls_eval.jsonl", f"{root}/input/data/eval/transactions.jsonl")
shutil.copy(f"{data}/train/tiny-bert.json", f"{root}/code/config.json")
shutil.copy(f"{data}/tokenizers/wordpiece-multilingual-cased/tokenizer.json", f"{root}/code/")
open(f"{root}/code/job.yaml", "w").write(
    "model: {config: config.json, tokenizer: tokenizer.json}\n"
    "task: sequence-classification\n"
    "hyperparameters:\n"
    "  logging_steps: 1\n  save_strategy: steps\n  save_steps: 4\n"
    "  eval_strategy: steps\n  eval_steps: 4\n  seed: 7\n")
# The SDK JSON-encodes every value (sagemaker.estimator: json.dumps).
json.dump({k: json.dumps(v) for k, v in hps.items()},
          open(f"{root}/input/config/hyperparameters.json", "w"), indent=1)
json.dump({"current_host": current, "hosts": hosts, "network_interface_name": "eth0"},
          open(f"{root}/input/config/resourceconfig.json", "w"))
channel = {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated",
           "RecordWrapperType": "None"}
json.dump({"train": channel, "eval": channel}, open(f"{root}/input/config/inputdataconfig.json", "w"))
PY
}

# The estimator's hyperparameters: the job file, TrainingArguments names, a
# dotted job key, and what the SDK adds for entry_point, source_dir,
# instance_type and distribution={'smdistributed':{'dataparallel':{'enabled':True}}}.
estimator_hps() {  # PER_DEVICE_BATCH
  cat <<JSON
{"job": "job.yaml", "max_steps": 12, "learning_rate": 0.001,
 "per_device_train_batch_size": $1, "data.max_seq_length": 32, "task": "sequence-classification",
 "sagemaker_program": "train.py", "sagemaker_submit_directory": "s3://bucket/scripts/",
 "sagemaker_container_log_level": 20, "sagemaker_job_name": "bert-transactions-2022-02-02",
 "sagemaker_region": "eu-west-1", "sagemaker_instance_type": "ml.p3.16xlarge",
 "sagemaker_distributed_dataparallel_enabled": true,
 "sagemaker_distributed_dataparallel_custom_mpi_options": ""}
JSON
}

echo "== the same training as the equivalent job file"
make_tree "$work/ml" "$(estimator_hps 8)"
cat > ref.yaml <<YAML
model: {config: $work/ml/code/config.json, tokenizer: $work/ml/code/tokenizer.json}
task: sequence-classification
data: {train: $work/ml/input/data/train, eval: $work/ml/input/data/eval, max_seq_length: 32}
hyperparameters: {output_dir: ref, max_steps: 12, learning_rate: 0.001, per_device_train_batch_size: 8,
  logging_steps: 1, save_strategy: steps, save_steps: 4, eval_strategy: steps, eval_steps: 4, seed: 7}
YAML
"$loom" train ref.yaml --quiet
LOOM_SAGEMAKER_ROOT=$work/ml "$loom" sagemaker train > sm.log 2>&1 || { cat sm.log; fail "loom sagemaker exited $?"; }
compare ref ml/checkpoints 1e-12 1e-12
for f in model/config.json model/model.safetensors model/tokenizer.json output/data/metrics.jsonl \
         checkpoints/checkpoint-12/loom_checkpoint.json; do
  [[ -f ml/$f ]] || fail "no $f"
done
[[ ! -e ml/output/failure ]] || fail "a failure file after a good run: $(cat ml/output/failure)"
cmp ml/model/model.safetensors ref/model.safetensors || fail "the model folder holds another model"
grep -q "sagemaker_program, .*: set by the SageMaker SDK" sm.log || fail "no note on the SDK's keys"

echo "== metric_definitions regexes (docs/sagemaker.md) against the log"
python3 - sm.log ml/output/data/metrics.jsonl "$here/../../docs/sagemaker.md" <<'PY'
import json, re, sys
log, metrics, doc = open(sys.argv[1]).read(), sys.argv[2], open(sys.argv[3]).read()
defs = dict(re.findall(r"\{'Name': '([^']+)', 'Regex': r'([^']+)'\}", doc))
assert {"train:loss", "eval:loss", "eval:accuracy"} <= set(defs), defs
rows = [json.loads(l) for l in open(metrics)]
train = {r["step"]: r["loss"] for r in rows if "loss" in r}
evals = [r for r in rows if "eval_loss" in r]
for name, key in (("train:loss", None), ("eval:loss", "eval_loss"), ("eval:accuracy", "eval_accuracy")):
    found = [float(v) for v in re.findall(defs[name], log)]
    want = [train[s] for s in sorted(train)] if key is None else [r[key] for r in evals]
    assert found, f"{name}: regex {defs[name]} matched nothing"
    for v in found:
        assert any(abs(v - w) <= 5e-5 for w in want), f"{name}: {v} is none of {want}"
    if key:
        assert len(found) == len(want), (name, found, want)
    print(f"{name}: {len(found)} value(s) read, each equal to metrics.jsonl")
PY

echo "== SIGTERM inside a step, then the same job again"
make_tree "$work/stop" "$(estimator_hps 8)"
set +e
LOOM_FAULT=forward:7:term LOOM_SAGEMAKER_ROOT=$work/stop "$loom" sagemaker train > stop.log 2>&1
rc=$?
set -e
[[ $rc == 75 ]] || { cat stop.log; fail "stopped run: exit $rc, want 75"; }
[[ ! -e stop/output/failure ]] || fail "a failure file after a stop: $(cat stop/output/failure)"
# As an image whose entry point is plain `loom` is started: `loom train`.
LOOM_SAGEMAKER_ROOT=$work/stop "$loom" train > resume.log 2>&1 || { cat resume.log; fail "resume"; }
grep -q "^loom sagemaker: 1 host(s) x 1 rank(s)" resume.log || { cat resume.log; fail "loom train was not taken as SageMaker's train"; }
grep -q "resuming from checkpoint-" resume.log || { cat resume.log; fail "did not resume"; }
compare ref stop/checkpoints 1e-12 1e-12

echo "== bad hyperparameters: the failure file says which and why"
bad() {  # KEY JSON_VALUE PATTERN
  local hps
  hps=$(estimator_hps 8 | python3 -c "import json,sys; h=json.load(sys.stdin); h['$1']=json.loads(sys.argv[1]); print(json.dumps(h))" "$2")
  rm -rf "$work/bad" && make_tree "$work/bad" "$hps"
  if LOOM_SAGEMAKER_ROOT=$work/bad "$loom" sagemaker train > bad.log 2>&1; then fail "$1=$2 accepted"; fi
  [[ -f bad/output/failure ]] || { cat bad.log; fail "$1=$2: no failure file"; }
  echo "  $1=$2 -> $(head -1 bad/output/failure)"
  grep -Eq -- "$3" bad/output/failure || fail "$1=$2: failure file '$(cat bad/output/failure)' does not match '$3'"
}
bad epochs 3 'hyperparameters.json: "epochs".*num_train_epochs'
bad learning_rate '"fast"' 'hyperparameters.json: "learning_rate".*(number|float)'
bad job '"missing.yaml"' 'hyperparameters.json: "job": the job file .missing.yaml. does not exist'
bad data.max_seq_lenght 32 'hyperparameters.json: "data.max_seq_lenght".*max_seq_length'

echo "== the SM_* variables instead of the files"
make_tree "$work/env" "$(estimator_hps 8)"
rm env/input/config/hyperparameters.json env/input/config/inputdataconfig.json
mkdir -p "$work/env-model" "$work/env-out"
SM_HPS=$(estimator_hps 8) SM_CHANNEL_TRAIN=$work/env/input/data/train SM_CHANNEL_EVAL=$work/env/input/data/eval \
SM_MODEL_DIR=$work/env-model SM_OUTPUT_DATA_DIR=$work/env-out SM_NUM_GPUS=0 \
  LOOM_SAGEMAKER_ROOT=$work/env "$loom" sagemaker train > env.log 2>&1 || { cat env.log; fail "SM_* run"; }
cmp env-model/model.safetensors ref/model.safetensors || fail "SM_MODEL_DIR holds another model"
[[ -f env-out/metrics.jsonl ]] || fail "no metrics.jsonl in SM_OUTPUT_DATA_DIR"

echo "== two hosts: the leader starts the ranks, the other host waits"
if ! unshare --uts true 2>/dev/null; then
  echo "SKIP (two hosts): unshare --uts is not permitted here"; echo "sagemaker: ok"; exit 0
fi
cat > agent.sh <<'SH'
#!/bin/sh
host=$1; shift
exec unshare --uts sh -c "hostname host-$(echo "$host" | tr . -) && exec $*"
SH
chmod +x agent.sh
hosts='["127.0.0.3", "127.0.0.2"]'
make_tree "$work/two" "$(estimator_hps 4)" "$hosts" 127.0.0.2
make_tree "$work/two-w" "$(estimator_hps 4)" "$hosts" 127.0.0.3
LOOM_SAGEMAKER_SSHD= LOOM_SAGEMAKER_WAIT_S=120 LOOM_SAGEMAKER_ROOT=$work/two-w \
  "$loom" sagemaker train > worker.log 2>&1 &
worker=$!
OMPI_MCA_plm_rsh_agent=$work/agent.sh LOOM_SAGEMAKER_ROOT=$work/two timeout 300 \
  "$loom" sagemaker train > two.log 2>&1 || { cat two.log; fail "leader"; }
grep -q "^loom launch: mpirun .* -np 2 --host 127.0.0.2:1,127.0.0.3:1 " two.log || { cat two.log; fail "not launched across SM_HOSTS"; }
set +e; wait "$worker"; wrc=$?; set -e
[[ $wrc == 0 ]] || { cat worker.log; fail "the worker exited $wrc"; }
grep -q "127.0.0.3: the leader's job has ended here" worker.log || { cat worker.log; fail "worker did not wait for the job"; }
compare ref two/checkpoints 1e-6 1e-4
echo "sagemaker: ok"
