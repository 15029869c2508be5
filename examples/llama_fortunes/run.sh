#!/usr/bin/env bash
# A small Llama end to end on Debian's fortune cookies, on the CPU:
#   1. the data (../fortunes/prepare_fortunes.py): pretraining text and the
#      four-category classification split, its eval tenth held out of both;
#   2. the held-out fortunes' causal-LM loss and perplexity at random weights;
#   3. causal-LM pretraining from config.json (pretrain.yaml), then the same
#      loss and perplexity again;
#   4. LoRA (`peft:`) as LlamaForSequenceClassification on the pretrained base
#      (finetune_lora.yaml) and on a random one (finetune_lora_scratch.yaml);
#   5. the numbers side by side.
# Usage: examples/llama_fortunes/run.sh [path/to/loom] [threads, default 2]
# Data and outputs go to examples/llama_fortunes/{data,out}/. Measured: 19 to
# 26 minutes on 2 shared cores (README.md has the numbers).
# PRETRAIN_STEPS and LORA_STEPS shorten the runs (tests/cli/llama_example.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
loom=${1:-$root/build/cpu-release/loom}
threads=${2:-2}
[[ -x $loom ]] || { echo "build loom first (cmake --build build/cpu-release --target loom)" >&2; exit 2; }
loom=$(cd "$(dirname "$loom")" && pwd)/$(basename "$loom")
cd "$here"
mkdir -p out
pre_set=() lora_set=()
[[ -z ${PRETRAIN_STEPS:-} ]] || pre_set=(--set "hyperparameters.max_steps=$PRETRAIN_STEPS")
[[ -z ${LORA_STEPS:-} ]] || lora_set=(--set "hyperparameters.max_steps=$LORA_STEPS"
  --set hyperparameters.eval_strategy=steps --set "hyperparameters.eval_steps=$LORA_STEPS"
  --set hyperparameters.save_strategy=steps --set "hyperparameters.save_steps=$LORA_STEPS")

echo "== Data: Debian's fortune cookies"
python3 ../fortunes/prepare_fortunes.py data

# Causal-LM loss on the held-out fortunes (cls_eval.jsonl: not in pretrain.txt).
lm_eval() {  # MODEL_OVERRIDE...
  "$loom" eval pretrain.yaml --threads "$threads" --json "$@" \
    --set data.eval=data/cls_eval.jsonl --set data.text_column=text | tail -1
}
start=$SECONDS
echo
echo "== Held-out causal-LM loss at random weights"
lm_eval > out/lm_before.json
cat out/lm_before.json

echo
echo "== Causal-LM pretraining from config.json (pretrain.yaml)"
t0=$SECONDS
"$loom" train pretrain.yaml --threads "$threads" "${pre_set[@]}" | tee out/pretrain.log | grep -v '^step [0-9]*/[0-9]* .*eta'
t_pre=$((SECONDS - t0))
lm_eval --set model=out/pretrain > out/lm_after.json
cat out/lm_after.json

echo
echo "== LoRA sequence classification on the pretrained Llama (finetune_lora.yaml)"
t0=$SECONDS
"$loom" train finetune_lora.yaml --threads "$threads" "${lora_set[@]}" | tee out/lora.log | grep -v '^step [0-9]*/[0-9]* .*eta'
t_lora=$((SECONDS - t0))

echo
echo "== Baseline: the same LoRA job on a random, never pretrained Llama (finetune_lora_scratch.yaml)"
t0=$SECONDS
"$loom" train finetune_lora_scratch.yaml --threads "$threads" "${lora_set[@]}" | tee out/lora-scratch.log |
  grep -v '^step [0-9]*/[0-9]* .*eta'
t_scratch=$((SECONDS - t0))

python3 - "$t_pre" "$t_lora" "$t_scratch" "$((SECONDS - start))" "$threads" <<'PY'
import collections, json, re, sys
t_pre, t_lora, t_scratch, total, threads = sys.argv[1:]
before, after = (json.load(open(f"out/lm_{w}.json")) for w in ("before", "after"))
def best(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return max((r for r in rows if "eval_accuracy" in r), key=lambda r: r["eval_accuracy"])
def trainable(log):
    m = re.search(r"LoRA: .*?; (\d+) trainable parameters", open(log).read())
    return int(m.group(1)) if m else -1
def total_params(log):
    m = re.search(r"model: \S+ \(.*?\), (\d+) parameters", open(log).read())
    return int(m.group(1)) if m else -1
labels = collections.Counter(json.loads(l)["label"] for l in open("data/cls_eval.jsonl"))
lora, scratch = best("out/lora/metrics.jsonl"), best("out/lora-scratch/metrics.jsonl")
print()
print(f"== Results on the held-out fortunes ({sum(labels.values())} for classification; "
      f"{threads} threads, {total} s in all)")
print(f"causal LM, random weights: loss {before['eval_loss']:.3f}, perplexity {before['eval_perplexity']:.1f}")
print(f"causal LM, pretrained:     loss {after['eval_loss']:.3f}, perplexity {after['eval_perplexity']:.1f}"
      f"  ({total_params('out/pretrain.log')} parameters, {t_pre} s)")
print(f"LoRA on the pretrained Llama: accuracy {lora['eval_accuracy']:.3f}, macro F1 {lora['eval_f1']:.3f}"
      f"  ({trainable('out/lora.log')} trainable parameters, {t_lora} s)")
print(f"LoRA on a random Llama:       accuracy {scratch['eval_accuracy']:.3f}, macro F1 {scratch['eval_f1']:.3f}"
      f"  ({trainable('out/lora-scratch.log')} trainable parameters, {t_scratch} s)")
print(f"majority class:               accuracy {max(labels.values()) / sum(labels.values()):.3f}")
PY
echo "adapter: $here/out/lora (adapter_model.safetensors, adapter_config.json; base: out/pretrain)"
