#!/usr/bin/env bash
# `loom plan` on the Llama family: the llama-lm fixture (grouped-query
# attention, SwiGLU, an untied head) on the CPU planner and, with --json, the
# cluster planner; Llama 2 7B by its published config. Exact parameter counts,
# forward FLOPs per token against the hand count, and tp that does not divide
# the key/value heads refused with its reason.
#   $1 = loom binary, $2 = tests/data directory
set -euo pipefail
loom=$1
data=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# The fixture by its config alone (no tokenizer): the plan
# reads nothing else.
cat > "$work/lm.yaml" <<YAML
model: {config: $data/hf/llama-lm/config.json}
task: causal-lm
data: {max_seq_length: 32}
hyperparameters: {per_device_train_batch_size: 8}
YAML
out=$("$loom" plan "$work/lm.yaml" --world 4 --all)
echo "$out"
grep -q "^LlamaForCausalLM .*0.1M parameters (94528), 2 layers, hidden 64, 4 heads (2 key/value)" \
  <<<"$out" || fail "CPU plan header"
grep -q "^dp2 tp2 pp1 " <<<"$out" || fail "tp 2 (divides the 2 key/value heads) missing"
grep -q "^dp1 tp4 pp1 .*not feasible: key/value heads (2) not divisible by tp" <<<"$out" ||
  fail "tp 4 reason"

# Cluster planner, one layout as JSON: the model as priced.
j=$("$loom" plan "$work/lm.yaml" --machine h100-sxm --layout dp=4,tp=2,micro_batch=1,global_batch=8 --json)
echo "$j"
jq -e '.feasible == true and .model.params == 94528 and .model.kv_heads == 2 and
       .model.gated_mlp == true' <<<"$j" >/dev/null || fail "llama-lm model fields: $j"
# Per layer 2 (q 64x64 + k, v 64x32 + o 64x64 + 3 x 64x96) + 4 x 32 keys x 64;
# 2 layers and the untied head 2 x 64 x 256.
jq -e '.model.forward_flops_per_token == 2 * (2 * (4096 + 2048 + 2048 + 4096 + 18432) + 8192) + 32768' \
  <<<"$j" >/dev/null || fail "llama-lm FLOPs per token: $j"
bad=$("$loom" plan "$work/lm.yaml" --machine h100-sxm --layout dp=2,tp=4,micro_batch=1,global_batch=8 --json)
jq -e '.feasible == false and (.reason | test("key/value heads \\(2\\) not divisible by tp 4"))' \
  <<<"$bad" >/dev/null || fail "tp 4 reason (cluster): $bad"

# Llama 2 7B (meta-llama/Llama-2-7b-hf config.json, the keys that size it).
cat > "$work/llama2-7b.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000,
 "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
 "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 4096,
 "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
 "tie_word_embeddings": false, "attention_bias": false}
JSON
cat > "$work/7b.yaml" <<YAML
model: {config: $work/llama2-7b.json}
task: causal-lm
data: {max_seq_length: 4096}
hyperparameters: {per_device_train_batch_size: 1, gradient_accumulation_steps: 8}
YAML
j=$("$loom" plan "$work/7b.yaml" --machine h100-sxm \
      --layout dp=8,micro_batch=1,global_batch=64,zero_stage=1,recompute=full --json)
echo "$j"
jq -e '.feasible == true and .model.params == 6738415616 and .model.kv_heads == 32' \
  <<<"$j" >/dev/null || fail "7B model fields: $j"
jq -e '.model.forward_flops_per_token ==
         32 * (2 * (4 * 4096 * 4096 + 3 * 4096 * 11008) + 4 * 4096 * 4096) + 2 * 4096 * 32000' \
  <<<"$j" >/dev/null || fail "7B FLOPs per token: $j"
# bf16 weights: 2 bytes per parameter of the exact count on one GPU (no tp, no pp).
jq -e '(.memory_gib.weights * 1073741824 - 2 * 6738415616 | fabs) < 1' <<<"$j" >/dev/null ||
  fail "7B weights: $j"
# The search over one node finds layouts that fit.
rows=$("$loom" plan "$work/7b.yaml" --machine h100-sxm --json --max-pp 2 --micro-batch 1)
[[ $(wc -l <<<"$rows") -ge 1 ]] || fail "7B search found no layout"
jq -es 'all(.[]; .feasible and .model.params == 6738415616)' <<<"$rows" >/dev/null ||
  fail "7B search rows"
txt=$("$loom" plan "$work/7b.yaml" --machine h100-sxm --max-pp 2 --micro-batch 1 --top 3)
echo "$txt"
grep -q "^LlamaForCausalLM: 6.74B parameters (6738415616), 32 layers" <<<"$txt" ||
  fail "7B table header"
echo "plan_llama: ok"
