#!/usr/bin/env bash
# push_to_hub with the HF Trainer's keys against the test Hub server
# (tests/hub/server.js), read back with the official @huggingface/hub client:
#   1. a multilingual sentiment job (hub_strategy every_save, hub_token):
#      every save is a commit, then "End of training"; the repo holds the
#      model card (base model, hyperparameters, the eval table), the
#      TensorBoard events and the final model, byte for byte;
#   2. the server dies in the middle of an upload: that push retries,
#      then warns; training completes; the next pushes succeed;
#   3. hub_strategy checkpoint into a private repo with save_total_limit 1:
#      last-checkpoint/ holds the final checkpoint; no token, no access.
#   $1 = loom binary, $2 = tests/data directory
set -u
loom=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$(cd "$2" && pwd)
source "$(dirname "$0")/lib/hub.sh"
w=$(mktemp -d)
trap 'hub_stop; rm -rf "$w"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
hub_start || { echo "SKIP: $hub_why"; exit 0; }

# The base model, uploaded by the npm client: a tiny multilingual-cased BERT.
hub_tiny_model "$w/base" || exit 1
rm -rf "$w/base/runs" "$w/base/report.html" "$w/base/metrics.jsonl"
HF_TOKEN=hf_good hub_client upload acme/tiny-multilingual-cased "$w/base" >/dev/null || fail "npm upload of the base"

job() {  # $1 = file, $2 = output dir, then extra hyperparameter lines
    local f=$1 out=$2
    shift 2
    cat >"$f" <<YAML
model: acme/tiny-multilingual-cased
task: sequence-classification
data:
  train: $data/train/cls_train.jsonl
  eval: $data/train/cls_eval.jsonl
  max_seq_length: 32
hyperparameters:
  output_dir: $out
  max_steps: 8
  per_device_train_batch_size: 8
  learning_rate: 5e-05
  logging_steps: 1
  eval_strategy: steps
  eval_steps: 2
  save_strategy: steps
  save_steps: 2
  push_to_hub: True
YAML
    local line
    for line in "$@"; do echo "  $line" >>"$f"; done
}

# --- 1. every_save ------------------------------------------------------------
job "$w/sentiment.yaml" "$w/out" "hub_model_id: acme/sentiment" "hub_strategy: every_save" "hub_token: hf_good"
"$loom" train "$w/sentiment.yaml" >"$w/train.log" 2>&1 || fail "every_save training: $(tail -5 "$w/train.log")"
grep -q "hf_good" "$w/train.log" && fail "the hub token appears in the log"
grep -rlq "hf_good" "$w/out" && fail "the hub token is written in the output folder: $(grep -rl hf_good "$w/out")"
titles=$(hub_client commits acme/sentiment | tr '\n' '|')
[[ $titles == "End of training|Training in progress, step 8|Training in progress, step 6|Training in progress, step 4|Training in progress, step 2|initial commit|" ]] ||
    fail "commits: $titles"
files=$(hub_client files acme/sentiment)
for f in README.md config.json model.safetensors tokenizer.json tokenizer_config.json special_tokens_map.json; do
    grep -qx "$f" <<<"$files" || fail "$f not in the repo: $files"
done
events=$(grep '^runs/.*tfevents' <<<"$files" | head -1)
[[ -n $events ]] || fail "no TensorBoard events in the repo: $files"
hub_client download acme/sentiment "$events" "$w/events" && cmp -s "$w/events" "$w/out/${events}" ||
    fail "pushed $events differs from the local one"
hub_client download acme/sentiment model.safetensors "$w/final.safetensors" &&
    cmp -s "$w/final.safetensors" "$w/out/model.safetensors" || fail "pushed model differs from output_dir's"
hub_client download acme/sentiment README.md "$w/README.md" || fail "no README.md"
for piece in "base_model: acme/tiny-multilingual-cased" "generated_from_trainer" "learning_rate: 5e-05" \
    "training_steps: 8" "| Training Loss | Epoch | Step | accuracy |" "cls_train.jsonl"; do
    grep -qF -- "$piece" "$w/README.md" || fail "model card lacks '$piece'"
done
[[ $(grep -cE '^\| [0-9.]+ \| [0-9.]+ \| [2468] \|' "$w/README.md") -eq 4 ]] ||
    fail "model card eval table has not 4 rows: $(cat "$w/README.md")"
acc=$(python3 -c 'import json,sys; print("%.4g" % [e for e in json.load(open(sys.argv[1]))["log_history"] if "eval_accuracy" in e][-1]["eval_accuracy"])' "$w/out/trainer_state.json")
grep -qx -- "- accuracy: $acc" "$w/README.md" || fail "model card's accuracy is not the last eval's $acc"

# --- 2. the server dies mid-upload --------------------------------------------
# The 3rd LFS upload (the first push has at most 2) kills the server, in
# the middle of a later push; it comes back once Loom has warned.
hub_kill
hub_restart --exit-on-lfs-put 3 || fail "restart with the fault: $hub_why"
job "$w/fault.yaml" "$w/fault" "hub_model_id: acme/sentiment-fault" "hub_token: hf_good"
LOOM_HUB_PUSH_ATTEMPTS=2 LOOM_HUB_PUSH_RETRY_S=1 LOOM_REMOTE_MAX_ATTEMPTS=2 LOOM_REMOTE_RETRY_BASE_MS=50 \
    "$loom" train "$w/fault.yaml" >"$w/fault.log" 2>&1 &
train_pid=$!
for _ in $(seq 600); do
    grep -q "hub: warning: push" "$w/fault.log" && break
    kill -0 "$train_pid" 2>/dev/null || break
    sleep 0.1
done
wait "$hub_pid" 2>/dev/null  # it exited on the fault
hub_restart || fail "restart after the fault: $hub_why"
wait "$train_pid" || fail "training with a failing push exited non-zero: $(tail -5 "$w/fault.log")"
failed=$(sed -n 's/^hub: warning: push "Training in progress, step \([0-9]*\)" to acme\/sentiment-fault failed after 2 attempts.*/\1/p' "$w/fault.log")
[[ -n $failed ]] || fail "no warning after the retries: $(grep hub: "$w/fault.log")"
grep -q "push \"Training in progress, step $failed\" to acme/sentiment-fault failed (attempt 1 of 2)" "$w/fault.log" ||
    fail "no retry of the failed push: $(grep hub: "$w/fault.log")"
for s in 2 4 6 8; do [[ -f $w/fault/checkpoint-$s/model.safetensors ]] || fail "checkpoint-$s lost"; done
titles=$(hub_client commits acme/sentiment-fault | tr '\n' '|')
[[ $titles == "End of training|"*"Training in progress, step 2|initial commit|" ]] || fail "fault commits: $titles"
[[ $titles == *"step $failed|"* ]] && fail "the killed push committed: $titles"
hub_client download acme/sentiment-fault model.safetensors "$w/fault.safetensors" &&
    cmp -s "$w/fault.safetensors" "$w/fault/model.safetensors" || fail "the push after the fault differs"

# --- 3. hub_strategy checkpoint, private, save_total_limit 1 -------------------
job "$w/ckpt.yaml" "$w/ckpt" "hub_model_id: acme/sentiment-ckpt" "hub_strategy: checkpoint" \
    "hub_private_repo: true" "save_total_limit: 1" "max_steps: 4"
sed -i '0,/max_steps: 8/{/max_steps: 8/d}' "$w/ckpt.yaml"
HF_TOKEN=hf_good "$loom" train "$w/ckpt.yaml" >"$w/ckpt.log" 2>&1 || fail "checkpoint training: $(tail -5 "$w/ckpt.log")"
files=$(HF_TOKEN=hf_good hub_client files acme/sentiment-ckpt)
for f in last-checkpoint/optimizer.safetensors last-checkpoint/model.safetensors last-checkpoint/trainer_state.json model.safetensors README.md; do
    grep -qx "$f" <<<"$files" || fail "$f not in the checkpoint repo: $files"
done
HF_TOKEN=hf_good hub_client download acme/sentiment-ckpt last-checkpoint/trainer_state.json "$w/ts.json" &&
    [[ $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["global_step"])' "$w/ts.json") == 4 ]] ||
    fail "last-checkpoint is not step 4"
hub_client download acme/sentiment-ckpt README.md "$w/x" 2>/dev/null && fail "the private repo was readable without a token"
[[ -d $w/ckpt/.hub-staging ]] && fail "staging left behind: $(ls -R "$w/ckpt/.hub-staging")"

[[ $failures -eq 0 ]] || { echo "$failures failure(s)" >&2; exit 1; }
echo "hub push: ok"
