#!/usr/bin/env bash
# Llama (LlamaForCausalLM: RMSNorm, rotary embeddings, grouped-query
# attention with 4 query and 2 key/value heads, SwiGLU, an untied lm_head)
# through the real `loom train` on the CPU, a 4-layer model made from the
# llama-lm fixture's config:
#   - one rank trains: the loss falls, and the exported folder is an HF Llama
#     folder (config.json model_type llama, every HF tensor name, the untied
#     lm_head stored);
#   - tp 2 (the key/value heads split so each rank keeps whole query
#     groups), dp 2 with ZeRO 1, and pp 2 train the 1-rank model (per-step
#     losses and grad norms within relative 1e-5, parameters within 3e-4);
#   - tp 4 cannot keep the 2 key/value heads' groups whole and is refused,
#     naming num_key_value_heads.
#   $1 = loom binary, $2 = tests/data directory
source "$(dirname "$0")/lib/layouts.sh" "$@"
# Grad norms: the first step's (same parameters) within relative 1e-6, so a
# replicated row counted twice or a shard counted once shows; later steps
# within 1e-4, as the layouts' rounding, amplified by AdamW's m / sqrt(v)
# where v is tiny, moves the parameters apart by ~1e-5.
compare() {
  python3 "$here/compare_runs.py" "$1" "$2" 1e-5 3e-4 1e-4
  python3 - "$1" "$2" <<'PY'
import json, sys
g = [next(r["grad_norm"] for r in map(json.loads, open(d + "/metrics.jsonl")) if r.get("step") == 1
          and "grad_norm" in r) for d in sys.argv[1:]]
assert abs(g[0] - g[1]) <= 1e-6 * abs(g[0]), f"{sys.argv[2]}: step 1 grad_norm {g[1]} vs {g[0]}"
print(f"{sys.argv[2]}: step 1 grad_norm {g[1]:.9g} vs {g[0]:.9g}")
PY
}

llama_config
layout_job causal-lm llama.json unigram-albert-style > llama.yaml

echo "== one rank"
"$loom" train llama.yaml --quiet --threads 1 --set hyperparameters.output_dir=l1
python3 - <<'PY'
import json, struct
losses = [r["loss"] for r in map(json.loads, open("l1/metrics.jsonl")) if "loss" in r]
assert len(losses) == 10, losses
assert losses[-1] < losses[0] - 0.5, f"loss did not fall: {losses}"
cfg = json.load(open("l1/config.json"))
assert cfg["model_type"] == "llama" and cfg["architectures"] == ["LlamaForCausalLM"], cfg
assert cfg["num_key_value_heads"] == 2 and cfg["tie_word_embeddings"] is False, cfg
raw = open("l1/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
names = set(json.loads(raw[8:8 + n])) - {"__metadata__"}
want = {"lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"}
for i in range(4):
    for m in ("input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
              "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
              "mlp.down_proj"):
        want.add(f"model.layers.{i}.{m}.weight")
assert names == want, (sorted(names - want), sorted(want - names))
print("one rank: loss", losses[0], "->", losses[-1], "; export has", len(names), "tensors")
PY

echo "== tp 2, dp 2 (ZeRO 1), pp 2"
train_on llama.yaml t2 2 --set distribution.tensor_parallel_degree=2
compare l1 t2
train_on llama.yaml d2 2 --set distribution.zero_stage=1 \
    --set hyperparameters.per_device_train_batch_size=4
compare l1 d2
train_on llama.yaml p2 2 --set distribution.pipeline_parallel_degree=2 \
    --set distribution.microbatches=2
compare l1 p2

echo "== tp 4 is refused"
if mpi 4 "$loom" train llama.yaml --quiet --set hyperparameters.output_dir=t4 \
    --set distribution.tensor_parallel_degree=4 > t4.log 2>&1; then
  echo "tp 4 ran"; exit 1
fi
grep -q "does not divide the 2 key/value heads (num_key_value_heads)" t4.log || { cat t4.log; exit 1; }
echo "PASS"
