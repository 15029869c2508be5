#!/usr/bin/env bash
# LoRA through the real `loom train` (a `peft:` block) on a 4-layer Llama
# made from the llama-lm fixture's config, on the CPU:
#   - one rank trains the adapter only: the loss falls, checkpoints hold the
#     adapter's optimizer state and nothing for the frozen base, and the final
#     folder is PEFT's (adapter_model.safetensors with PEFT's key names,
#     adapter_config.json);
#   - resumed from checkpoint-4 it ends with the same adapter;
#   - merge_adapters: true exports the merged full model, and dp 2 with
#     ZeRO 1 and ZeRO 2 trains the 1-rank model (losses, grad norms, merged weights);
#   - an unsupported PEFT option is refused, naming the key (tensor
#     parallelism and lora_dropout: train_lora_tp.sh).
#   $1 = loom binary, $2 = tests/data directory
source "$(dirname "$0")/lib/layouts.sh" "$@"

llama_config
layout_job causal-lm llama.json unigram-albert-style > lora.yaml
cat >> lora.yaml <<'YAML'
peft:
  peft_type: LORA
  task_type: CAUSAL_LM
  r: 4
  lora_alpha: 8
  lora_dropout: 0.0
  target_modules: [q_proj, v_proj, o_proj, gate_proj, down_proj]
  bias: none
YAML

echo "== one rank: the adapter trains, PEFT's folder comes out"
"$loom" train lora.yaml --threads 1 --set hyperparameters.output_dir=l1 > l1.log 2>&1 ||
  { cat l1.log; exit 1; }
grep -q "task_type: CAUSAL_LM noted" l1.log || { cat l1.log; echo "task_type not noted"; exit 1; }
python3 - <<'PY'
import json, struct, os
def keys(p):
    raw = open(p, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return {k: v for k, v in json.loads(raw[8:8 + n]).items() if k != "__metadata__"}
losses = [r["loss"] for r in map(json.loads, open("l1/metrics.jsonl")) if "loss" in r]
assert len(losses) == 10 and losses[-1] < losses[0] - 0.1, f"loss did not fall: {losses}"
assert not os.path.exists("l1/model.safetensors"), "a LoRA run exported the full model"
k = keys("l1/adapter_model.safetensors")
want = {}
for i in range(4):
    for m, o, inp in (("self_attn.q_proj", 64, 64), ("self_attn.v_proj", 32, 64),
                      ("self_attn.o_proj", 64, 64), ("mlp.gate_proj", 96, 64),
                      ("mlp.down_proj", 64, 96)):
        p = f"base_model.model.model.layers.{i}.{m}"
        want[p + ".lora_A.weight"] = [4, inp]
        want[p + ".lora_B.weight"] = [o, 4]
assert {n: v["shape"] for n, v in k.items()} == want, sorted(set(k) ^ set(want))[:4]
c = json.load(open("l1/adapter_config.json"))
assert c["peft_type"] == "LORA" and c["r"] == 4 and c["lora_alpha"] == 8, c
assert c["target_modules"] == sorted(["q_proj", "v_proj", "o_proj", "gate_proj", "down_proj"]), c
assert c["task_type"] == "CAUSAL_LM" and c["bias"] == "none" and c["use_dora"] is False, c
# The checkpoint: the adapter's moments only, the base stored for resuming.
ck = "l1/checkpoint-4"
opt = [f for f in os.listdir(ck) if f.startswith("optimizer")]
assert opt, os.listdir(ck)
ok = keys(f"{ck}/{opt[0]}")
assert set(ok) == {f"{s}.{n[len('base_model.model.'):]}" for n in want
                   for s in ("exp_avg", "exp_avg_sq")}, sorted(ok)[:4]
mk = keys(f"{ck}/model.safetensors")
assert all(n[len("base_model.model."):] in mk for n in want), "checkpoint lacks the adapter"
print("one rank: loss", losses[0], "->", losses[-1], ";", len(k), "adapter tensors")
PY

echo "== resumed from checkpoint-4"
mkdir r1 && cp -r l1/checkpoint-4 r1/
"$loom" train lora.yaml --quiet --threads 1 --set hyperparameters.output_dir=r1 \
    --set hyperparameters.resume_from_checkpoint=latest
python3 - <<'PY'
import json, struct
from array import array
def tensors(p):
    raw = open(p, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    return {k: array("f", raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}
a, b = tensors("l1/adapter_model.safetensors"), tensors("r1/adapter_model.safetensors")
assert a.keys() == b.keys()
d = max(max(abs(x - y) for x, y in zip(a[k], b[k])) for k in a)
print("resumed: max adapter difference", d)
assert d <= 1e-6, d
PY

echo "== merge_adapters: 1 rank and dp 2 (ZeRO 1)"
"$loom" train lora.yaml --quiet --threads 1 --set hyperparameters.output_dir=m1 \
    --set peft.merge_adapters=true
train_on lora.yaml d2 2 --set distribution.zero_stage=1 \
    --set hyperparameters.per_device_train_batch_size=4 --set peft.merge_adapters=true
compare m1 d2 1e-5 3e-4 1e-4
train_on lora.yaml z2 2 --set distribution.zero_stage=2 \
    --set hyperparameters.per_device_train_batch_size=4 --set peft.merge_adapters=true
compare m1 z2 1e-5 3e-4 1e-4
python3 - <<'PY'
import json
c = json.load(open("m1/config.json"))
assert c["model_type"] == "llama", c
PY

echo "== refusals name the key"
if "$loom" train lora.yaml --quiet --set hyperparameters.output_dir=x \
    --set peft.use_dora=true > dora.log 2>&1; then echo "use_dora ran"; exit 1; fi
grep -q "peft.use_dora: only false is supported" dora.log || { cat dora.log; exit 1; }
echo "PASS"
