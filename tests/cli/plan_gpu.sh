#!/usr/bin/env bash
# `loom plan --machine`: the cluster planner's interface. A job given by its
# model config alone; one --layout priced as JSON with every documented field;
# the rules an infeasible layout breaks; ZeRO and precision in the memory
# parts; the search (feasible first, fastest first) and --explain; a machine
# defined in YAML, and the errors for bad keys.
#   $1 = loom binary, $2 = tests/data directory (unused)
set -euo pipefail
loom=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# GPT-2 XL's shape: 48 layers, hidden 1600, 25 heads.
cat > "$work/gpt.json" <<'JSON'
{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 50257, "n_embd": 1600,
 "n_layer": 48, "n_head": 25, "n_positions": 1024}
JSON
cat > "$work/job.yaml" <<YAML
model: {config: $work/gpt.json}
task: causal-lm
data: {max_seq_length: 1024}
hyperparameters: {per_device_train_batch_size: 8, gradient_accumulation_steps: 4}
YAML
plan() { "$loom" plan "$work/job.yaml" "$@"; }

# One layout, JSON: the documented fields, and the FLOP bookkeeping.
j=$(plan --machine h100-sxm --layout dp=4,tp=1,pp=2,micro_batch=2,global_batch=64,recompute=full --json)
for k in dp tp pp schedule micro_batch global_batch recompute step_s tokens_per_s \
         tflops_per_gpu_model tflops_per_gpu_hardware mfu memory_gib_per_gpu feasible reason; do
  jq -e "has(\"$k\")" <<<"$j" >/dev/null || fail "--json lacks $k: $j"
done
jq -e '.dp == 4 and .pp == 2 and .schedule == "1f1b" and .feasible == true' <<<"$j" >/dev/null ||
  fail "layout fields: $j"
# Full recompute runs one more forward: hardware = model x 4/3 up to the
# non-recomputed output layer.
jq -e '(.tflops_per_gpu_hardware / .tflops_per_gpu_model) > 1.25 and
       (.tflops_per_gpu_hardware / .tflops_per_gpu_model) < 1.334' <<<"$j" >/dev/null ||
  fail "hardware vs model FLOPs: $j"
# tokens/s = global batch x seq / step.
jq -e '((.tokens_per_s * .step_s) - 65536 | fabs) < 1' <<<"$j" >/dev/null || fail "tokens/s: $j"

# ZeRO-1 divides the optimizer state by dp; fp32 doubles the weights.
z0=$(plan --machine h100-sxm --layout dp=8,micro_batch=1,global_batch=64 --json)
z1=$(plan --machine h100-sxm --layout dp=8,micro_batch=1,global_batch=64,zero_stage=1 --json)
jq -en --argjson a "$z0" --argjson b "$z1" \
  '($a.memory_gib.optimizer / $b.memory_gib.optimizer - 8 | fabs) < 1e-6' >/dev/null ||
  fail "ZeRO-1 optimizer share"
f32=$(plan --machine h100-sxm --layout dp=8,micro_batch=1,global_batch=64,precision=fp32 --json)
jq -en --argjson a "$z0" --argjson b "$f32" \
  '($b.memory_gib.weights / $a.memory_gib.weights - 2 | fabs) < 1e-6' >/dev/null ||
  fail "fp32 weights"

# Infeasible layouts say why.
bad=$(plan --machine h100-sxm --layout dp=4,tp=2,micro_batch=1,global_batch=64 --json)
jq -e '.feasible == false and (.reason | test("heads \\(25\\) not divisible by tp 2"))' <<<"$bad" \
  >/dev/null || fail "tp reason: $bad"
big=$(plan --machine h100-sxm --layout dp=8,micro_batch=64,global_batch=512 --json)
jq -e '.feasible == false and (.reason | test("GiB per GPU.*over the 80 GiB of h100-sxm"))' \
  <<<"$big" >/dev/null || fail "memory reason: $big"
plan --machine h100-sxm --layout dp=2,micro_batch=1,global_batch=64 --json |
  jq -e '.reason | test("job has 8 GPUs")' >/dev/null || fail "world reason"

# Search: feasible rows first, fastest first; --explain names winner and runner-up.
rows=$(plan --machine h100-sxm --json --max-pp 4)
[[ $(wc -l <<<"$rows") -ge 5 ]] || fail "search found few layouts"
jq -es 'all(.[]; .feasible) and ([.[].step_s] == ([.[].step_s] | sort))' <<<"$rows" >/dev/null ||
  fail "search order"
jq -es 'all(.[]; .global_batch == 32 and .pp <= 4)' <<<"$rows" >/dev/null || fail "job batch/bounds"
ex=$(plan --machine h100-sxm --max-pp 4 --explain --top 3)
echo "$ex"
grep -q "^winner " <<<"$ex" || fail "--explain winner"
grep -q "^runner-up .*% slower" <<<"$ex" || fail "--explain runner-up"

# A machine from YAML: half the memory of an H100 makes a fitting layout not fit.
printf 'base: h100-sxm\nhbm_gib: 8\n' > "$work/small.yaml"
plan --machine "$work/small.yaml" --layout dp=8,micro_batch=1,global_batch=64 --json |
  jq -e '.feasible == false and .machine == "small"' >/dev/null || fail "YAML machine"
printf 'base: h100-sxm\nhbm_gb: 8\n' > "$work/typo.yaml"
err=$(plan --machine "$work/typo.yaml" 2>&1 || true)
grep -q "typo.yaml:2: unknown key 'hbm_gb'" <<<"$err" || fail "YAML key error: $err"
err=$(plan --machine h100-sxm --layout dp=8,tpp=2 2>&1 || true)
grep -q "unknown key 'tpp'" <<<"$err" || fail "layout key error: $err"
err=$(plan --machine nope 2>&1 || true)
grep -q "unknown machine 'nope' (built-in: a100-40gb-sxm" <<<"$err" || fail "machine error: $err"
err=$(plan --layout dp=8 2>&1 || true)
grep -q -- "--layout needs --machine NAME" <<<"$err" || fail "--layout without --machine: $err"
err=$(plan --machine h100-sxm --world 8 2>&1 || true)
grep -q -- "--world is for the CPU planner" <<<"$err" || fail "--world with --machine: $err"
echo "plan_gpu: ok"
