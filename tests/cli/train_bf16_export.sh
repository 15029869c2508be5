#!/usr/bin/env bash
# Checkpoints as they are published: bf16 weights, sharded with
# model.safetensors.index.json, through the real `loom train` (a 4-layer
# Llama made from the llama-lm fixture's config):
#   - hyperparameters.export_dtype: bfloat16 with max_shard_size 40KB writes
#     the final model as bf16 shards with an index, config.json torch_dtype
#     "bfloat16", every value the round-to-nearest-even bf16 of the fp32
#     master (the last checkpoint, which stays float32 and says so);
#   - training from that sharded bf16 folder starts from exactly its values
#     (the first loss equals a run from an fp32 copy of them), and exports
#     bf16 again by default (the type the weights came in), or float32 when
#     export_dtype says so;
#   - a bad export_dtype is refused, naming the key and the choices.
#   $1 = loom binary, $2 = tests/data directory
source "$(dirname "$0")/lib/layouts.sh" "$@"

llama_config
layout_job causal-lm llama.json unigram-albert-style > llama.yaml
sed -i 's/max_steps: 10/max_steps: 4/' llama.yaml

# safetensors reader/writer for the checks (plain struct: no numpy needed).
cat > st.py <<'PY'
import json, os, struct
def read(path):
    """name -> (dtype, shape, raw bytes) of one file, or of every shard an index names."""
    if path.endswith(".index.json"):
        idx = json.load(open(path))
        out = {}
        for shard in sorted(set(idx["weight_map"].values())):
            part = read(os.path.join(os.path.dirname(path), shard))
            for k in part:
                assert idx["weight_map"][k] == shard, (k, shard)
            out.update(part)
        assert set(out) == set(idx["weight_map"]), "index and shards disagree"
        return out
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    base = 8 + n
    return {k: (v["dtype"], v["shape"], raw[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
            for k, v in head.items()}
def write(path, tensors):
    head, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for k in sorted(tensors):
        dt, shape, b = tensors[k]
        head[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
def f32(b):
    return struct.unpack(f"<{len(b) // 4}f", b)
def bf16_as_f32(b):
    u = struct.unpack(f"<{len(b) // 2}H", b)
    return struct.unpack(f"<{len(u)}f", struct.pack(f"<{len(u)}I", *[x << 16 for x in u]))
def bf16_of(x):
    """torch's float32 -> bfloat16: round to nearest, ties to even (no NaNs here)."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return (u + 0x7FFF + ((u >> 16) & 1)) >> 16 & 0xFFFF
PY

echo "== export_dtype bfloat16, sharded"
"$loom" train llama.yaml --threads 1 --set hyperparameters.output_dir=b1 \
    --set hyperparameters.export_dtype=bfloat16 --set hyperparameters.max_shard_size=40KB \
    > b1.log 2>&1 || { cat b1.log; exit 1; }
grep -q "written as bfloat16 (hyperparameters.export_dtype)" b1.log || { cat b1.log; exit 1; }
python3 - <<'PY'
import json, os, struct, sys
sys.path.insert(0, ".")
import st
assert not os.path.exists("b1/model.safetensors"), "a single file next to the shards"
idx = json.load(open("b1/model.safetensors.index.json"))
shards = sorted(set(idx["weight_map"].values()))
assert len(shards) > 1 and shards[0].startswith("model-00001-of-"), shards
out = st.read("b1/model.safetensors.index.json")
assert {v[0] for v in out.values()} == {"BF16"}, {v[0] for v in out.values()}
assert json.load(open("b1/config.json"))["torch_dtype"] == "bfloat16"
ck = st.read("b1/checkpoint-4/model.safetensors")
assert {v[0] for v in ck.values()} == {"F32"}
assert json.load(open("b1/checkpoint-4/config.json"))["torch_dtype"] == "float32"
assert set(ck) == set(out), (set(ck) ^ set(out))
n = 0
for k, (dt, shape, b) in ck.items():
    want = [st.bf16_of(x) for x in st.f32(b)]
    got = list(struct.unpack(f"<{len(out[k][2]) // 2}H", out[k][2]))
    assert out[k][1] == shape and got == want, k
    n += len(want)
print(f"bf16 export: {len(shards)} shards, {len(out)} tensors, {n} values = RNE(fp32 master)")
# The same values as float32, for the reference run below.
os.makedirs("f1", exist_ok=True)
st.write("f1/model.safetensors", {k: ("F32", s, struct.pack(f"<{len(b) // 2}f", *st.bf16_as_f32(b)))
                                  for k, (dt, s, b) in out.items()})
c = json.load(open("b1/config.json")); c["torch_dtype"] = "float32"
json.dump(c, open("f1/config.json", "w"))
PY
cp b1/tokenizer.json f1/

echo "== training from the sharded bf16 folder"
cat > from.yaml <<YAML
$(sed "s|^model:.*|model: {path: $PWD/b1}|" llama.yaml)
YAML
"$loom" train from.yaml --threads 1 --set hyperparameters.output_dir=b2 > b2.log 2>&1 \
    || { cat b2.log; exit 1; }
grep -q "written as bfloat16, the type of .*model.safetensors.index.json" b2.log || { cat b2.log; exit 1; }
sed "s|^model:.*|model: {path: $PWD/f1}|" llama.yaml > ref.yaml
"$loom" train ref.yaml --quiet --threads 1 --set hyperparameters.output_dir=f2 > f2.log 2>&1 \
    || { cat f2.log; exit 1; }
"$loom" train from.yaml --quiet --threads 1 --set hyperparameters.output_dir=b3 \
    --set hyperparameters.export_dtype=float32 > b3.log 2>&1 || { cat b3.log; exit 1; }
python3 - <<'PY'
import json, sys
sys.path.insert(0, ".")
import st
first = lambda d: next(r["loss"] for r in map(json.loads, open(d + "/metrics.jsonl")) if "loss" in r)
assert first("b2") == first("f2"), (first("b2"), first("f2"))
assert {v[0] for v in st.read("b2/model.safetensors").values()} == {"BF16"}
assert json.load(open("b2/config.json"))["torch_dtype"] == "bfloat16"
assert {v[0] for v in st.read("f2/model.safetensors").values()} == {"F32"}
assert {v[0] for v in st.read("b3/model.safetensors").values()} == {"F32"}
assert json.load(open("b3/config.json"))["torch_dtype"] == "float32"
print("from bf16 shards: first loss", first("b2"), "= the fp32 copy's; exports BF16 / F32 as asked")
PY

echo "== a bad export_dtype"
if "$loom" train llama.yaml --quiet --set hyperparameters.export_dtype=int8 > bad.log 2>&1; then
  echo "export_dtype int8 was accepted"; exit 1
fi
grep -q "export_dtype: 'int8' is not an export type (expected auto, float32, bfloat16 or float16)" \
    bad.log || { cat bad.log; exit 1; }
echo "PASS"
