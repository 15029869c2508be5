#!/usr/bin/env bash
# Sharded safetensors as save_pretrained writes them: `max_shard_size: 300KB`
# splits the final model into model-0000i-of-0000n.safetensors plus
# model.safetensors.index.json (checked in Python against the single-file
# save of the same run: same tensors, same bytes, total_size right); the
# folder predicts exactly as the single file does; pushed by Loom, read back
# by @huggingface/hub byte for byte, and resolved by id (index then shards).
#   $1 = loom binary, $2 = tests/data directory
set -u
loom=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$(cd "$2" && pwd)
source "$(dirname "$0")/lib/hub.sh"
w=$(mktemp -d)
trap 'hub_stop; rm -rf "$w"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

cat >"$w/job.yaml" <<YAML
model:
  config: $data/train/tiny-bert.json
  tokenizer: $data/tokenizers/wordpiece-multilingual-cased/tokenizer.json
task: sequence-classification
data:
  train: $data/train/cls_train.jsonl
  max_seq_length: 32
hyperparameters:
  output_dir: $w/single
  max_steps: 2
  save_strategy: 'no'
YAML
"$loom" train "$w/job.yaml" --quiet >"$w/t1.log" 2>&1 || fail "single-file training: $(tail -3 "$w/t1.log")"
"$loom" train "$w/job.yaml" --quiet --set hyperparameters.output_dir="$w/sharded" \
    --set hyperparameters.max_shard_size=300KB >"$w/t2.log" 2>&1 || fail "sharded training: $(tail -3 "$w/t2.log")"
[[ -e $w/sharded/model.safetensors ]] && fail "a sharded save also wrote model.safetensors"
python3 - "$w/single/model.safetensors" "$w/sharded" <<'PY' || fail "the shards are not the single file split"
import json, os, struct, sys
def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}
single = read(sys.argv[1])
index = json.load(open(os.path.join(sys.argv[2], "model.safetensors.index.json")))
files = sorted(set(index["weight_map"].values()))
n = len(files)
assert n >= 2, files
assert files == ["model-%05d-of-%05d.safetensors" % (i + 1, n) for i in range(n)], files
merged = {}
for f in files:
    part = read(os.path.join(sys.argv[2], f))
    assert os.path.getsize(os.path.join(sys.argv[2], f)) < 300000 + 4096 or len(part) == 1, f
    for k, v in part.items():
        assert index["weight_map"][k] == f, (k, f)
        merged[k] = v
assert merged.keys() == single.keys(), set(merged) ^ set(single)
assert all(merged[k] == single[k] for k in single)
assert index["metadata"]["total_size"] == sum(len(v[2]) for v in single.values())
PY
for d in single sharded; do
    "$loom" predict --model "$w/$d" --input "$data/train/cls_eval.jsonl" >"$w/$d.pred" 2>"$w/$d.err" ||
        fail "predict from $d: $(cat "$w/$d.err")"
done
cmp -s "$w/single.pred" "$w/sharded.pred" || fail "sharded and single-file predictions differ"
"$loom" train "$w/job.yaml" --quiet --set hyperparameters.max_shard_size=lots >/dev/null 2>"$w/bad.err" &&
    fail "max_shard_size=lots accepted"
grep -q "max_shard_size" "$w/bad.err" || fail "bad size message: $(cat "$w/bad.err")"

hub_start || { echo "SKIP (hub part): $hub_why"; [[ $failures -eq 0 ]] || exit 1; exit 0; }
rm -rf "$w/sharded/runs" "$w/sharded/report.html"
HF_TOKEN=hf_good "$loom" push "$w/sharded" --repo acme/sharded >"$w/push.log" 2>&1 || fail "push: $(cat "$w/push.log")"
for f in "$w"/sharded/model-*.safetensors "$w/sharded/model.safetensors.index.json"; do
    b=$(basename "$f")
    hub_client download acme/sharded "$b" "$w/dl" && cmp -s "$w/dl" "$f" || fail "npm download of $b differs"
done
"$loom" predict --model acme/sharded --input "$data/train/cls_eval.jsonl" >"$w/hub.pred" 2>"$w/hub.err" ||
    fail "predict by id from a sharded repo: $(cat "$w/hub.err")"
cmp -s "$w/hub.pred" "$w/single.pred" || fail "predictions from the sharded repo differ"
snap=$(ls -d "$HF_HOME"/hub/models--acme--sharded/snapshots/*)
[[ $(ls "$snap"/model-*.safetensors | wc -l) -eq $(ls "$w"/sharded/model-*.safetensors | wc -l) ]] ||
    fail "not every shard was downloaded: $(ls "$snap")"

[[ $failures -eq 0 ]] || { echo "$failures failure(s)" >&2; exit 1; }
echo "hub sharded: ok"
