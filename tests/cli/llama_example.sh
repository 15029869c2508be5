#!/usr/bin/env bash
# examples/llama_fortunes keeps working: run.sh, shortened (8 causal-LM steps,
# 4 LoRA steps per classifier), pretrains the Llama from config.json, trains
# both LoRA classifiers and prints the results; the held-out loss falls and
# the adapter folder is PEFT's (LoRA A/B for every targeted linear, the score
# head as modules_to_save, adapter_config.json naming the pretrained base).
#   $1 = loom binary, $2 = tests/data directory
set -euo pipefail
loom=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
[[ -d /usr/share/games/fortunes ]] || { echo "SKIP: Debian's fortunes are not installed"; exit 0; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$root/examples/llama_fortunes" "$root/examples/fortunes" "$work/"
rm -rf "$work/llama_fortunes/data" "$work/llama_fortunes/out"
cd "$work/llama_fortunes"
PRETRAIN_STEPS=8 LORA_STEPS=4 ./run.sh "$loom" 2 > run.log 2>&1 || { cat run.log; exit 1; }
grep -q "^LoRA on the pretrained Llama: accuracy" run.log || { cat run.log; exit 1; }
grep -q "^LoRA on a random Llama: *accuracy" run.log || { cat run.log; exit 1; }
python3 - <<'PY'
import json, struct
before, after = (json.load(open(f"out/lm_{w}.json"))["eval_loss"] for w in ("before", "after"))
assert after < before - 0.5, f"held-out causal-LM loss {before} -> {after} after pretraining"
raw = open("out/lora/adapter_model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
keys = {k: v["shape"] for k, v in json.loads(raw[8:8 + n]).items() if k != "__metadata__"}
assert keys.pop("base_model.model.score.weight") == [4, 128], "no score head"
mods = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
want = {f"base_model.model.model.layers.{i}.{m}.lora_{ab}.weight"
        for i in range(4) for m in mods for ab in "AB"}
assert set(keys) == want, sorted(set(keys) ^ want)[:4]
c = json.load(open("out/lora/adapter_config.json"))
assert c["task_type"] == "SEQ_CLS" and c["modules_to_save"] == ["score"], c
assert c["base_model_name_or_path"].endswith("out/pretrain"), c["base_model_name_or_path"]
print("held-out causal-LM loss", round(before, 3), "->", round(after, 3))
PY
