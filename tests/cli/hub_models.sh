#!/usr/bin/env bash
# Model ids from a Hugging Face Hub: the official @huggingface/hub client
# (npm) uploads to the test server (tests/hub/server.js), Loom resolves the
# ids through the HF cache layout and trains and predicts from them; Loom's
# `loom push` is downloaded back by the npm client byte for byte. Also: the
# cache reused under HF_HUB_OFFLINE=1 without a single request, a revision,
# a private repo with and without a token, a cut download resumed, a corrupt
# one refused by its SHA-256, three processes sharing one download, and
# crafted repos (pytorch_model.bin only, shard names leaving the snapshot,
# a symlink out of the cache, a safetensors header past the file's end, a
# config describing far more parameters than its weights hold).
#   $1 = loom binary, $2 = tests/data directory
set -u
loom=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$(cd "$2" && pwd)
source "$(dirname "$0")/lib/hub.sh"
w=$(mktemp -d)
trap 'hub_stop; rm -rf "$w"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
# Multipart uploads for anything past 300 kB (the tiny model is ~830 kB).
hub_start --multipart-chunk 300000 || { echo "SKIP: $hub_why"; exit 0; }
requests() { wc -l <"$hub_data/requests.log"; }

train_job() {  # $1 = job file, $2 = model line, $3 = output dir
    cat >"$1" <<YAML
model: $2
task: sequence-classification
data:
  train: $data/train/cls_train.jsonl
  max_seq_length: 32
hyperparameters:
  output_dir: $3
  max_steps: 2
  per_device_train_batch_size: 8
  save_strategy: 'no'
YAML
}
hub_tiny_model "$w/base" || { fail "fixture training"; exit 1; }
rm -rf "$w/base/runs" "$w/base/report.html" "$w/base/metrics.jsonl"

# --- the npm client uploads, Loom trains from the id -----------------------
commit1=$(HF_TOKEN=hf_good hub_client upload acme/base "$w/base") || fail "npm upload of acme/base"
train_job "$w/job.yaml" acme/base "$w/out"
if "$loom" train "$w/job.yaml" --quiet >"$w/train.log" 2>&1; then
    repo="$HF_HOME/hub/models--acme--base"
    [[ $(cat "$repo/refs/main" 2>/dev/null) == "$commit1" ]] || fail "refs/main is not the npm commit $commit1"
    snap="$repo/snapshots/$commit1"
    for f in config.json tokenizer.json tokenizer_config.json special_tokens_map.json model.safetensors; do
        cmp -s "$snap/$f" "$w/base/$f" || fail "cached $f differs from what the npm client uploaded"
    done
    sha=$(sha256sum "$w/base/model.safetensors" | cut -d' ' -f1)
    [[ $(readlink "$snap/model.safetensors") == "../../blobs/$sha" ]] ||
        fail "model.safetensors is not a link to blobs/<sha256>: $(readlink "$snap/model.safetensors")"
    [[ -f $w/out/model.safetensors ]] || fail "training from the id wrote no model"
else
    fail "train from acme/base: $(tail -3 "$w/train.log")"
fi

# --- offline: the cache as it is, and not one request -----------------------
before=$(requests)
HF_HUB_OFFLINE=1 "$loom" predict --model acme/base --input "$data/train/cls_eval.jsonl" \
    >"$w/pred.jsonl" 2>"$w/pred.err" || fail "offline predict: $(cat "$w/pred.err")"
[[ $(wc -l <"$w/pred.jsonl") -eq 48 ]] || fail "offline predict wrote $(wc -l <"$w/pred.jsonl") lines, not 48"
HF_HUB_OFFLINE=1 "$loom" predict --model acme/nothere --input "$data/train/cls_eval.jsonl" \
    >/dev/null 2>"$w/off.err" && fail "offline predict of an uncached id succeeded"
grep -q "HF_HUB_OFFLINE is set and it is not in the cache" "$w/off.err" || fail "offline message: $(cat "$w/off.err")"
[[ $(requests) -eq $before ]] || fail "HF_HUB_OFFLINE=1 still sent $(( $(requests) - before )) requests"

# --- a revision: branch v1 keeps the first upload, main moves on ------------
HF_TOKEN=hf_good hub_client branch acme/base v1 || fail "npm createBranch"
rm -rf "$w/out/runs" "$w/out/report.html" "$w/out/metrics.jsonl" "$w/out/trainer_state.json"
commit2=$(HF_TOKEN=hf_good hub_client upload acme/base "$w/out") || fail "npm upload of the trained model"
"$loom" predict --model acme/base --revision v1 --input "$data/train/cls_eval.jsonl" >/dev/null 2>"$w/rev.err" ||
    fail "predict --revision v1: $(cat "$w/rev.err")"
"$loom" predict --model acme/base --input "$data/train/cls_eval.jsonl" >/dev/null 2>"$w/main.err" ||
    fail "predict at main: $(cat "$w/main.err")"
[[ $(cat "$HF_HOME/hub/models--acme--base/refs/v1" 2>/dev/null) == "$commit1" ]] || fail "refs/v1 is not the first commit"
# loom forward by id: the HF parity fixture, pushed with a tokenizer, still passes.
mkdir -p "$w/mlm"
cp "$data/hf/bert-mlm/config.json" "$data/hf/bert-mlm/model.safetensors" "$w/base/tokenizer.json" "$w/mlm/"
HF_TOKEN=hf_good hub_client upload acme/bert-mlm "$w/mlm" >/dev/null || fail "npm upload of acme/bert-mlm"
fx=$data/hf/bert-mlm
"$loom" forward --model acme/bert-mlm --batch "$fx/batch.safetensors" --compare "$fx/expected.safetensors" \
    >"$w/fwd.out" 2>&1 || fail "forward by id: $(tail -3 "$w/fwd.out")"
grep -Eq '^parity: .* PASS$' "$w/fwd.out" || fail "forward by id: no PASS parity line"
[[ $(cat "$HF_HOME/hub/models--acme--base/refs/main") == "$commit2" ]] || fail "main did not move to $commit2"
cmp -s "$HF_HOME/hub/models--acme--base/snapshots/$commit2/model.safetensors" "$w/out/model.safetensors" ||
    fail "main's snapshot is not the second upload"
cmp -s "$HF_HOME/hub/models--acme--base/snapshots/$commit1/model.safetensors" "$w/base/model.safetensors" ||
    fail "v1's snapshot changed"

# --- loom push, downloaded back by the npm client ----------------------------
# A model the server has not seen, so its weights are really uploaded.
"$loom" train "$w/job.yaml" --quiet --set hyperparameters.seed=7 --set hyperparameters.output_dir="$w/topush" \
    >"$w/topush.log" 2>&1 || fail "second training: $(tail -3 "$w/topush.log")"
cmp -s "$w/topush/model.safetensors" "$w/out/model.safetensors" && fail "the second model is the first"
before=$(requests)
HF_TOKEN=hf_good "$loom" push "$w/topush" --repo acme/pushed >"$w/push.log" 2>&1 || fail "loom push: $(cat "$w/push.log")"
tail -n +"$((before + 1))" "$hub_data/requests.log" | grep -q "PUT /lfs/.*/part/3" ||
    fail "the push made no multipart upload"
for f in config.json tokenizer.json model.safetensors special_tokens_map.json; do
    hub_client download acme/pushed "$f" "$w/dl_$f" && cmp -s "$w/dl_$f" "$w/topush/$f" ||
        fail "npm download of pushed $f differs"
done

# --- a private repo, with and without a token ---------------------------------
HF_TOKEN=hf_good hub_client upload acme/secret "$w/base" --private >/dev/null || fail "npm private upload"
pred() { "$loom" predict --model "$1" --input "$data/train/cls_eval.jsonl" >/dev/null 2>"$w/p.err"; }
pred acme/secret && fail "a private repo resolved without a token"
grep -q "no token was given" "$w/p.err" || fail "no-token message: $(cat "$w/p.err")"
HF_TOKEN=hf_wrongtoken42 pred acme/secret && fail "a wrong token was accepted"
grep -q "the token from HF_TOKEN was refused" "$w/p.err" || fail "HF_TOKEN message: $(cat "$w/p.err")"
grep -q "hf_wrongtoken42" "$w/p.err" && fail "the token was printed"
echo hf_filetoken77 >"$HF_HOME/token"
pred acme/secret && fail "a wrong token file was accepted"
grep -qF "the token from the token file $HF_HOME/token was refused" "$w/p.err" || fail "token file message: $(cat "$w/p.err")"
grep -q "hf_filetoken77" "$w/p.err" && fail "the file's token was printed"
echo hf_good >"$HF_HOME/token"
pred acme/secret || fail "the token file's valid token: $(cat "$w/p.err")"
rm -f "$HF_HOME/token"

# --- a cut download resumes; a corrupt one is refused by its SHA-256 --------
sha=$(sha256sum "$w/topush/model.safetensors" | cut -d' ' -f1)
export HF_HOME=$w/hf2
mkdir -p "$HF_HOME/hub/models--acme--pushed/blobs"
part="$HF_HOME/hub/models--acme--pushed/blobs/$sha.incomplete"
head -c 400000 "$w/topush/model.safetensors" >"$part"
pred acme/pushed 2>/dev/null || fail "resume: $(cat "$w/p.err")"
grep -q "resuming at 0.4 MB" "$w/p.err" || fail "no resume: $(cat "$w/p.err")"
cmp -s "$HF_HOME/hub/models--acme--pushed/blobs/$sha" "$w/topush/model.safetensors" || fail "resumed blob differs"
export HF_HOME=$w/hf3
mkdir -p "$HF_HOME/hub/models--acme--pushed/blobs"
head -c 400000 /dev/zero >"$HF_HOME/hub/models--acme--pushed/blobs/$sha.incomplete"
pred acme/pushed && fail "a corrupt partial download was accepted"
grep -q "does not match the Hub's $sha" "$w/p.err" || fail "hash message: $(cat "$w/p.err")"
[[ -e $HF_HOME/hub/models--acme--pushed/blobs/$sha.incomplete ]] && fail "the corrupt download was kept"
pred acme/pushed || fail "download after a corrupt one: $(cat "$w/p.err")"

# --- three processes at once: one download ----------------------------------
export HF_HOME=$w/hf4
gets_before=$(grep -c "GET /lfs/$sha" "$hub_data/requests.log")
pids=()
for i in 1 2 3; do
    "$loom" predict --model acme/pushed --input "$data/train/cls_eval.jsonl" >"$w/race$i.out" 2>&1 &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a concurrent predict failed"; done
gets=$(( $(grep -c "GET /lfs/$sha" "$hub_data/requests.log") - gets_before ))
[[ $gets -eq 1 ]] || fail "three processes downloaded the weights $gets times, not once"

# --- crafted repos ------------------------------------------------------------
mkdir -p "$w/pt" "$w/evil" "$w/abs" "$w/bighead"
cp "$w/base/config.json" "$w/base/tokenizer.json" "$w/pt/"
head -c 1000 /dev/urandom >"$w/pt/pytorch_model.bin"
cp "$w/base/config.json" "$w/base/tokenizer.json" "$w/evil/"
echo '{"weight_map": {"a": "../../../../evil.safetensors"}}' >"$w/evil/model.safetensors.index.json"
cp "$w/base/config.json" "$w/base/tokenizer.json" "$w/abs/"
echo '{"weight_map": {"a": "/tmp/abs.safetensors"}}' >"$w/abs/model.safetensors.index.json"
cp "$w/base/config.json" "$w/base/tokenizer.json" "$w/bighead/"
python3 -c 'import struct,sys; open(sys.argv[1],"wb").write(struct.pack("<Q", 1 << 40) + b"{}")' "$w/bighead/model.safetensors"
# A config whose vocabulary would need terabytes, next to real (small) weights.
mkdir -p "$w/hugevocab"
cp "$w/base/tokenizer.json" "$w/base/model.safetensors" "$w/hugevocab/"
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["vocab_size"]=2000000000; json.dump(c, open(sys.argv[2],"w"))' \
    "$w/base/config.json" "$w/hugevocab/config.json"
for r in pt evil abs bighead hugevocab; do
    HF_TOKEN=hf_good hub_client upload "acme/$r" "$w/$r" >/dev/null || fail "npm upload of acme/$r"
done
pred acme/pt && fail "a pytorch_model.bin-only repo was accepted"
grep -q "only as pytorch_model.bin" "$w/p.err" || fail "pytorch_model.bin message: $(cat "$w/p.err")"
pred acme/evil && fail "a shard name with .. was accepted"
grep -q "would leave the repo folder" "$w/p.err" || fail "'..' shard message: $(cat "$w/p.err")"
[[ -e $HF_HOME/evil.safetensors || -e $HF_HOME/hub/evil.safetensors ]] && fail "a file was written outside the snapshot"
pred acme/abs && fail "an absolute shard name was accepted"
grep -q "is not a relative path" "$w/p.err" || fail "absolute shard message: $(cat "$w/p.err")"
pred acme/bighead && fail "a safetensors header past the end of the file was accepted"
grep -qi "header" "$w/p.err" || fail "header message: $(cat "$w/p.err")"
pred acme/hugevocab && fail "a config far larger than its weights was built"
grep -q "refusing to allocate" "$w/p.err" || fail "oversized config message: $(cat "$w/p.err")"
# A cached snapshot whose file links out of the cache.
snap="$HF_HOME/hub/models--acme--pushed/snapshots/$(cat "$HF_HOME/hub/models--acme--pushed/refs/main")"
cp "$w/topush/model.safetensors" "$w/outside.safetensors"
ln -sfn "$w/outside.safetensors" "$snap/model.safetensors"
HF_HUB_OFFLINE=1 pred acme/pushed && fail "a snapshot link out of the cache was followed"
grep -q "outside the cache" "$w/p.err" || fail "link-out message: $(cat "$w/p.err")"

[[ $failures -eq 0 ]] || { echo "$failures failure(s)" >&2; exit 1; }
echo "hub models: ok"
