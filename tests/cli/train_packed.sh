#!/usr/bin/env bash
# Packed documents (data.pack_boundaries) through the real `loom train`, on the
# llama-lm fixture (HF's LlamaForCausalLM weights, 256 ids) with a Llama-style
# tokenizer of one token per character (as train_instruct.sh), so the blocks
# are computed by hand below:
#   - `loom forward` on the hand-packed blocks with position_ids (a document's
#     first token unlabelled) gives the loss of the same pieces run one per
#     row, and without position_ids another loss: attention stays inside each
#     document only with them;
#   - the first step of `loom train` with pack_boundaries (one batch holding
#     every block) has exactly that loss, and with pack_boundaries false the
#     other;
#   - a job with pack_boundaries and packing false, or for masked-lm, is refused
#     naming the key;
#   - pp 2 (2 micro-batches) and gradient accumulation train the 1-rank model
#     with boundaries (compare_runs.py), on the 4-layer Llama of layouts.sh.
#   $1 = loom binary, $2 = tests/data directory
source "$(dirname "$0")/lib/layouts.sh" "$@"

char_tokenizer
python3 - "$data" <<'PY'
import json, struct, sys
d = sys.argv[1]
vocab = json.load(open("tokenizer.json"))["model"]["vocab"]

texts = ["the cat sat on the mat.", "a dog", "why is the sky blue?", "rain, then sun",
         "one two three four five six", "ok", "birds fly south in the autumn.", "tea or coffee?"]
with open("docs.jsonl", "w") as f:
    for t in texts:
        f.write(json.dumps({"text": t}) + "\n")

S = 16  # max_seq_length: the block size
docs = [[1] + [vocab[c] for c in "▁" + t.replace(" ", "▁")] for t in texts]
stream = [(i, t) for doc in docs for i, t in enumerate(doc)]
n_blocks = len(stream) // S
ids, pos, labels, pieces = [], [], [], []
for b in range(n_blocks):
    block = stream[b * S:(b + 1) * S]
    row_ids, row_pos, row_lab = [], [], []
    for k, (i, t) in enumerate(block):
        p = 0 if k == 0 or i == 0 else row_pos[-1] + 1  # a block cut restarts a piece
        if p == 0:
            pieces.append([])
        pieces[-1].append(t)
        row_ids.append(t)
        row_pos.append(p)
        row_lab.append(-100 if p == 0 else t)
    ids.append(row_ids); pos.append(row_pos); labels.append(row_lab)

def write(path, tensors):
    header, blob = {}, b""
    for name, rows in tensors.items():
        flat = [v for r in rows for v in r]
        raw = struct.pack(f"<{len(flat)}q", *flat)
        header[name] = {"dtype": "I64", "shape": [len(rows), len(rows[0])],
                        "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + blob)

ones = [[1] * S for _ in ids]
write("packed.safetensors", {"input_ids": ids, "attention_mask": ones, "position_ids": pos,
                             "labels": labels})
write("mixed.safetensors", {"input_ids": ids, "attention_mask": ones, "labels": labels})
L = max(map(len, pieces))
pad = lambda r, v: r + [v] * (L - len(r))
write("pieces.safetensors", {"input_ids": [pad(p, 2) for p in pieces],
                             "attention_mask": [pad([1] * len(p), 0) for p in pieces],
                             "labels": [pad(p, -100) for p in pieces]})
open("n_blocks", "w").write(str(n_blocks))
print(f"{len(stream)} tokens -> {n_blocks} blocks of {S}, {len(pieces)} document pieces")
PY

cat > job.yaml <<YAML
model: {path: $data/hf/llama-lm, tokenizer: $work/tokenizer.json}
task: causal-lm
data: {train: $work/docs.jsonl, pack_boundaries: true, max_seq_length: 16}
hyperparameters:
  output_dir: out
  max_steps: 1
  per_device_train_batch_size: $(cat n_blocks)
  learning_rate: 1.0e-3
  logging_steps: 1
  save_strategy: "no"
  seed: 7
YAML

"$loom" train job.yaml --threads 1 > train.log 2>&1 || { cat train.log; exit 1; }
"$loom" train job.yaml --threads 1 --set data.pack_boundaries=false \
    --set hyperparameters.output_dir=out_plain > plain.log 2>&1 || { cat plain.log; exit 1; }
for b in packed mixed pieces; do
  "$loom" forward --model "$data/hf/llama-lm" --batch $b.safetensors > $b.log
done
python3 - <<'PY'
import json, re
def first_loss(d):
    step = [r for r in map(json.loads, open(f"{d}/metrics.jsonl")) if "loss" in r and r.get("step") == 1]
    assert len(step) == 1, step
    return step[0]["loss"]
def fwd(name):
    m = re.search(r"^loss: (\S+) \(sum \S+ over (\d+) labelled", open(f"{name}.log").read(), re.M)
    return float(m.group(1)), int(m.group(2))
(packed, n), (mixed, n_mixed), (pieces, n_pieces) = fwd("packed"), fwd("mixed"), fwd("pieces")
assert n == n_pieces == n_mixed, (n, n_pieces, n_mixed)
assert abs(packed - pieces) <= 1e-5 * abs(pieces), f"packed {packed} vs one piece per row {pieces}"
assert abs(mixed - pieces) > 1e-3, f"without position_ids the loss should change: {mixed}"
got, plain = first_loss("out"), first_loss("out_plain")
assert abs(got - packed) <= 1e-5 * abs(packed), f"train loss {got}, packed forward {packed}"
assert abs(plain - got) > 1e-3, f"pack_boundaries false gave the same loss {plain}"
print(f"step 1 loss {got:.7f} = packed forward {packed:.7f} = pieces alone {pieces:.7f} "
      f"over {n} targets (no boundaries: {mixed:.7f}; train without: {plain:.7f})")
PY

echo "== pack_boundaries where it cannot apply is refused"
if "$loom" train job.yaml --set data.packing=false > nopack.log 2>&1; then echo "ran"; exit 1; fi
grep -q "data.pack_boundaries: .*data.packing is false" nopack.log || { cat nopack.log; exit 1; }
if "$loom" train job.yaml --set task=masked-lm > mlm.log 2>&1; then echo "ran"; exit 1; fi
grep -q "data.pack_boundaries: .*causal-lm, not masked-lm" mlm.log || { cat mlm.log; exit 1; }

echo "== dynamic rope_scaling past max_position_embeddings: the run says which length it reads"
mkdir -p dyn && cp "$data/hf/llama-lm/model.safetensors" dyn/
python3 - "$data/hf/llama-lm/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(rope_scaling={"type": "dynamic", "factor": 2.0}, max_position_embeddings=8)
json.dump(c, open("dyn/config.json", "w"))
PY
"$loom" train job.yaml --threads 1 --set model.path=$work/dyn \
    --set hyperparameters.output_dir=out_dyn > dyn.log 2>&1 || { cat dyn.log; exit 1; }
grep -q "dynamic rope_scaling with packed documents: .*data.max_seq_length 16 (past max_position_embeddings 8)" \
    dyn.log || { cat dyn.log; exit 1; }
if grep -q "dynamic rope_scaling" train.log; then echo "note without dynamic scaling"; exit 1; fi

echo "== layouts keep the boundaries: pp 2 and gradient accumulation train the 1-rank model"
llama_config
layout_job causal-lm llama.json unigram-albert-style > llama.yaml
set_docs=(--set data.pack_boundaries=true)
"$loom" train llama.yaml --quiet --threads 1 --set hyperparameters.output_dir=ref "${set_docs[@]}"
"$loom" train llama.yaml --quiet --threads 1 --set hyperparameters.output_dir=nodocs
train_on llama.yaml p2 2 "${set_docs[@]}" --set distribution.pipeline_parallel_degree=2 \
    --set distribution.microbatches=2
"$loom" train llama.yaml --quiet --threads 1 --set hyperparameters.output_dir=ga2 "${set_docs[@]}" \
    --set hyperparameters.per_device_train_batch_size=4 \
    --set hyperparameters.gradient_accumulation_steps=2
compare ref p2
compare ref ga2
# The reference itself depends on the boundaries (else the comparisons above
# would hold for a run that dropped them).
if python3 "$here/compare_runs.py" ref nodocs 1e-5 3e-4 > nodocs.log 2>&1; then
  echo "training with and without boundaries agreed"; exit 1
fi
echo "PASS"
