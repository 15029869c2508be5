#!/usr/bin/env bash
# `loom predict` as its --help teaches it: a QA model trained on the tiny data
# (64 positions) answers {"question", "context"} lines that carry no answers,
# with lengths from the model; a --doc-stride the model cannot take is refused
# naming the flag and the limit.
#   $1 = loom binary, $2 = tests/data directory
set -u
loom=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

help=$("$loom" predict --help) || fail "predict --help exited $?"
for piece in '"question"' '"context"' 'doc-stride' 'min(384' "RoBERTa"; do
    grep -qF -- "$piece" <<<"$help" || fail "--help does not mention $piece"
done

cat >"$tmp/job.yaml" <<YAML
model:
  config: $data/train/tiny-bert.json
  tokenizer: $data/tokenizers/wordpiece-multilingual-cased/tokenizer.json
task: question-answering
data:
  train: $data/train/qa_train.jsonl
  max_seq_length: 64
  doc_stride: 16
hyperparameters:
  output_dir: $tmp/out
  max_steps: 2
  per_device_train_batch_size: 8
  save_strategy: 'no'
YAML
"$loom" train "$tmp/job.yaml" --quiet >"$tmp/train.log" 2>&1 || {
    cat "$tmp/train.log" >&2
    fail "train exited non-zero"
}

cat >"$tmp/q.jsonl" <<'JSONL'
{"id": "a", "question": "What is the name of the animal?", "context": "A fish named Peter was very old."}
{"question": "Who?", "context": "Good my big house man near near good my today city a dog named Maria is near big city bad woman. The old cat was in the small house near the city with the bad man today."}
JSONL
if "$loom" predict --model "$tmp/out" --input "$tmp/q.jsonl" >"$tmp/pred.jsonl" 2>"$tmp/err.txt"; then
    python3 - "$tmp/q.jsonl" "$tmp/pred.jsonl" <<'PY' || fail "predictions are not spans of their contexts"
import json, sys
inputs = [json.loads(l) for l in open(sys.argv[1])]
preds = [json.loads(l) for l in open(sys.argv[2])]
assert len(preds) == len(inputs), (len(preds), len(inputs))
for q, p in zip(inputs, preds):
    ctx = q["context"]
    assert 0 <= p["start"] < p["end"] <= len(ctx), p
    assert ctx[p["start"]:p["end"]] == p["answer"], p
assert preds[0]["id"] == "a"
PY
    grep -q 'doc_stride 21 (default' "$tmp/err.txt" || fail "no default stride note: $(cat "$tmp/err.txt")"
else
    fail "predict exited non-zero: $(cat "$tmp/err.txt")"
fi

if "$loom" predict --model "$tmp/out" --input "$tmp/q.jsonl" --doc-stride 64 >/dev/null 2>"$tmp/err.txt"; then
    fail "--doc-stride 64 on a 64-token window was accepted"
else
    grep -q -- '--doc-stride 64 must be at least 0 and less than max_seq_length 64' "$tmp/err.txt" ||
        fail "--doc-stride error: $(cat "$tmp/err.txt")"
fi
if "$loom" predict --model "$tmp/out" --input "$tmp/q.jsonl" --max-seq-length 65 >/dev/null 2>"$tmp/err.txt"; then
    fail "--max-seq-length 65 on a 64-position model was accepted"
else
    grep -q -- '--max-seq-length 65 exceeds what the model accepts: 64 positions' "$tmp/err.txt" ||
        fail "--max-seq-length error: $(cat "$tmp/err.txt")"
fi

[[ $failures -eq 0 ]] || { echo "$failures failure(s)" >&2; exit 1; }
echo "predict: ok"
