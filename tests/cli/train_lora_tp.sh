#!/usr/bin/env bash
# LoRA under tensor and pipeline parallelism and lora_dropout through the real `loom train`,
# on the 4-layer GQA Llama of train_lora.sh (4 query heads, 2 key/value heads),
# on the CPU. Every layout trains the 1-rank adapter:
#   - tp 2, tp 2 x dp 2 with ZeRO 1 and 2, pp 2 and tp 2 x pp 2: the losses, grad
#     norms and merged weights of the 1-rank run (merge_adapters: true);
#   - the PEFT folders of the tp 2 and pp 2 runs hold the whole adapter
#     (PEFT's names and shapes) and equal the 1-rank run's;
#   - checkpoint-4 of the tp 2 run resumed at 1 rank, and the 1-rank one at
#     tp 2 x pp 2, end as the 1-rank run;
#   - lora_dropout 0.1: trains differently from 0, the same twice, and the same
#     at tp 2 and tp 2 x pp 2 (the mask is keyed by global element, not by rank);
#   - distribution: auto is refused, naming the key.
#   $1 = loom binary, $2 = tests/data directory
source "$(dirname "$0")/lib/layouts.sh" "$@"

llama_config
layout_job causal-lm llama.json unigram-albert-style > lora.yaml
cat >> lora.yaml <<'YAML'
peft:
  r: 4
  lora_alpha: 8
  target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]
YAML
T2="--set distribution.tensor_parallel_degree=2"
M="--set peft.merge_adapters=true"
P2="--set distribution.pipeline_parallel_degree=2 --set distribution.microbatches=2"

echo "== 1 rank, tp 2, tp 2 x dp 2 (ZeRO 1, 2), pp 2, tp 2 x pp 2: merged weights"
"$loom" train lora.yaml --quiet --threads 1 --set hyperparameters.output_dir=m1 $M
train_on lora.yaml mt2 2 $T2 $M
compare m1 mt2 1e-5 3e-4 1e-4
train_on lora.yaml mt2d2 4 $T2 $M --set distribution.zero_stage=1 \
    --set hyperparameters.per_device_train_batch_size=4
compare m1 mt2d2 1e-5 3e-4 1e-4
train_on lora.yaml mt2z2 4 $T2 $M --set distribution.zero_stage=2 \
    --set hyperparameters.per_device_train_batch_size=4
compare m1 mt2z2 1e-5 3e-4 1e-4
train_on lora.yaml mp2 2 $P2 $M
compare m1 mp2 1e-5 3e-4 1e-4
train_on lora.yaml mt2p2 4 $T2 $P2 $M
compare m1 mt2p2 1e-5 3e-4 1e-4

echo "== the PEFT folders of tp 2 and pp 2 are the 1-rank one"
"$loom" train lora.yaml --quiet --threads 1 --set hyperparameters.output_dir=a1
train_on lora.yaml at2 2 $T2
train_on lora.yaml ap2 2 $P2
for o in at2 ap2; do python3 - $o <<'PY'
import json, struct, sys
from array import array
def tensors(p):
    raw = open(p, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    return {k: (v["shape"], array("f", raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]))
            for k, v in h.items() if k != "__metadata__"}
run = sys.argv[1]
a, b = tensors("a1/adapter_model.safetensors"), tensors(f"{run}/adapter_model.safetensors")
assert a.keys() == b.keys(), sorted(a.keys() ^ b.keys())[:4]
p = "base_model.model.model.layers.0."
for m, o, i in (("self_attn.q_proj", 64, 64), ("self_attn.k_proj", 32, 64),
                ("self_attn.o_proj", 64, 64), ("mlp.down_proj", 64, 96)):
    assert b[p + m + ".lora_A.weight"][0] == [4, i], (m, b[p + m + ".lora_A.weight"][0])
    assert b[p + m + ".lora_B.weight"][0] == [o, 4], (m, b[p + m + ".lora_B.weight"][0])
d, k = max((max(abs(x - y) for x, y in zip(a[k][1], b[k][1])), k) for k in a)
moved = max(max(abs(x) for x in v) for n, (s, v) in a.items() if "lora_B" in n)
print(f"{run} adapter: max difference {d:.2e} ({k}); largest B element {moved:.2e}")
assert moved > 1e-3, "B did not move: the comparison would prove nothing"
assert d <= 3e-4, (d, k)
c1, c2 = json.load(open("a1/adapter_config.json")), json.load(open(f"{run}/adapter_config.json"))
assert c1 == c2, (c1, c2)
PY
done

echo "== tp 2's checkpoint-4 resumed at 1 rank, the 1-rank one at tp 2 x pp 2"
mkdir r1 r22 && cp -r mt2/checkpoint-4 r1/ && cp -r m1/checkpoint-4 r22/
"$loom" train lora.yaml --quiet --threads 1 --set hyperparameters.output_dir=r1 $M \
    --set hyperparameters.resume_from_checkpoint=latest
compare m1 r1 1e-5 3e-4
train_on lora.yaml r22 4 $T2 $P2 $M --set hyperparameters.resume_from_checkpoint=latest
compare m1 r22 1e-5 3e-4

echo "== lora_dropout 0.1: another run than 0, the same twice, at tp 2 and tp 2 x pp 2"
D="--set peft.lora_dropout=0.1"
"$loom" train lora.yaml --quiet --threads 1 --set hyperparameters.output_dir=p1 $M $D
"$loom" train lora.yaml --quiet --threads 1 --set hyperparameters.output_dir=p1b $M $D
compare p1 p1b 1e-12 1e-12
if python3 "$here/compare_runs.py" m1 p1 1e-6 1e-5 > same.log 2>&1; then
  cat same.log; echo "lora_dropout 0.1 trained the lora_dropout 0 model"; exit 1
fi
train_on lora.yaml pt2 2 $T2 $M $D
compare p1 pt2 1e-5 3e-4 1e-4
train_on lora.yaml pt2p2 4 $T2 $P2 $M $D
compare p1 pt2p2 1e-5 3e-4 1e-4

echo "== distribution: auto is refused, naming the key"
if "$loom" train lora.yaml --quiet --set hyperparameters.output_dir=auto \
    --set distribution.auto=true > auto.log 2>&1; then echo "auto ran"; exit 1; fi
grep -q "distribution: auto with a peft: block" auto.log || { cat auto.log; exit 1; }
echo "PASS"
