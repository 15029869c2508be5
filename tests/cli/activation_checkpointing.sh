#!/usr/bin/env bash
# Activation checkpointing through the real `loom train`:
#   - the per-step losses (dropout on) are exactly those of the run that
#     keeps every activation;
#   - the process's measured peak memory drops by what the memory plan
#     predicts for checkpointing (within 10%).
#   $1 = loom binary, $2 = tests/data directory
set -euo pipefail
loom=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMP_NUM_THREADS=2 MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824

# 8 layers at hidden 256, every batch padded to 128 tokens: activations
# (hundreds of MiB) dwarf everything that differs between the two runs.
cat > config.json <<'JSON'
{"architectures": ["BertForMaskedLM"], "model_type": "bert", "vocab_size": 5859,
 "hidden_size": 256, "num_hidden_layers": 8, "num_attention_heads": 4, "intermediate_size": 1024,
 "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
 "max_position_embeddings": 128, "type_vocab_size": 2, "initializer_range": 0.02,
 "layer_norm_eps": 1e-12, "pad_token_id": 0}
JSON
cat > job.yaml <<YAML
model: {config: $work/config.json, tokenizer: $data/tokenizers/wordpiece-multilingual-cased/tokenizer.json}
task: masked-lm
data: {train: $data/train/lm_train.jsonl, max_seq_length: 128, pad_to_multiple_of: 128}
hyperparameters:
  output_dir: out
  overwrite_output_dir: true
  max_steps: 3
  per_device_train_batch_size: 16
  learning_rate: 1.0e-3
  logging_steps: 1
  save_strategy: 'no'
  seed: 7
YAML

"$loom" train job.yaml --set hyperparameters.output_dir=plain > plain.log 2>&1
"$loom" train job.yaml --set hyperparameters.output_dir=ckpt \
  --set distribution.activation_checkpointing=true > ckpt.log 2>&1
grep -q "activation checkpointing: every 1" ckpt.log || { echo "FAIL: no checkpointing note"; cat ckpt.log; exit 1; }

python3 - <<'PY'
import json, re
def losses(d):
    return [r["loss"] for r in map(json.loads, open(d + "/metrics.jsonl")) if "loss" in r]
a, b = losses("plain"), losses("ckpt")
assert len(a) == 3 and a == b, f"losses differ: {a} vs {b}"
print("losses identical:", a)
def mem(log):
    text = open(log).read()
    act = float(re.search(r"activations ([0-9.]+) MiB per micro-batch", text).group(1))
    peak = float(re.search(r"process peak resident ([0-9.]+) MiB", text).group(1))
    return act, peak
(act_a, peak_a), (act_b, peak_b) = mem("plain.log"), mem("ckpt.log")
predicted, measured = act_a - act_b, peak_a - peak_b
print(f"planned activations {act_a:.1f} -> {act_b:.1f} MiB (saves {predicted:.1f}); "
      f"measured peak {peak_a:.1f} -> {peak_b:.1f} MiB (saves {measured:.1f})")
assert predicted > 50, "the plan predicts no saving worth measuring"
assert abs(measured - predicted) <= 0.1 * predicted, "measured saving is not the predicted one within 10%"
PY
