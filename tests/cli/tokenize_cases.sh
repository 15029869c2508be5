#!/usr/bin/env bash
# Runs the real `loom tokenize` over the cases of tests/data/tokenizers (as
# JSONL, one case per line) and compares every output field, overflowing and
# both decodes with the Hugging Face reference values.
#   $1 = loom binary, $2 = tests/data directory
set -euo pipefail
loom=$1
data=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for name in gpt2 bert-base-uncased unigram-albert-style wordpiece-multilingual-cased; do
  dir="$data/tokenizers/$name"
  python3 - "$dir/cases.json" "$work/$name.in.jsonl" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1], encoding="utf-8"))["cases"]
with open(sys.argv[2], "w", encoding="utf-8") as out:
    for c in cases:
        line = {k: c[k] for k in ("text", "pair", "add_special_tokens", "truncation", "padding")}
        out.write(json.dumps(line, ensure_ascii=False) + "\n")
PY
  "$loom" tokenize --tokenizer "$dir/tokenizer.json" --input "$work/$name.in.jsonl" \
      --output "$work/$name.out.jsonl" --threads 2
  python3 - "$dir/cases.json" "$work/$name.out.jsonl" "$name" <<'PY' || status=1
import json, sys
cases = json.load(open(sys.argv[1], encoding="utf-8"))["cases"]
got = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8") if l.strip()]
fields = ["ids", "tokens", "type_ids", "attention_mask", "special_tokens_mask",
          "offsets", "offsets_utf8", "word_ids", "sequence_ids"]
bad = 0
if len(got) != len(cases):
    print(f"{sys.argv[3]}: {len(got)} output lines for {len(cases)} cases"); sys.exit(1)
for c, g in zip(cases, got):
    want = c["encoding"]
    for f in fields:
        if g.get(f) != want[f]:
            bad += 1; print(f"{sys.argv[3]}/{c['id']}: {f} differs:\n  got  {g.get(f)}\n  want {want[f]}")
    if "overflowing" in want:
        go = g.get("overflowing", [])
        if len(go) != len(want["overflowing"]):
            bad += 1; print(f"{sys.argv[3]}/{c['id']}: {len(go)} overflowing pieces, want {len(want['overflowing'])}")
        else:
            for i, (a, b) in enumerate(zip(go, want["overflowing"])):
                for f in fields:
                    if a.get(f) != b[f]:
                        bad += 1; print(f"{sys.argv[3]}/{c['id']}: overflowing[{i}].{f} differs")
    for f in ("decoded", "decoded_with_special_tokens"):
        if g.get(f) != c[f]:
            bad += 1; print(f"{sys.argv[3]}/{c['id']}: {f}: got {g.get(f)!r} want {c[f]!r}")
print(f"{sys.argv[3]}: {len(cases)} cases, {bad} mismatches")
sys.exit(1 if bad else 0)
PY
done
# A malformed input line is reported with file:line.
echo '{"pair": "no text"}' > "$work/bad.jsonl"
if "$loom" tokenize --tokenizer "$data/tokenizers/gpt2/tokenizer.json" --input "$work/bad.jsonl" 2> "$work/err.txt"; then
  echo "expected a failure for a case without text"; status=1
elif ! grep -q "bad.jsonl:1: /: missing required field 'text'" "$work/err.txt"; then
  echo "unexpected error message:"; cat "$work/err.txt"; status=1
fi
# Interactive mode prints tokens and ids.
out=$(echo "Hello world" | "$loom" tokenize --tokenizer "$data/tokenizers/gpt2/tokenizer.json")
grep -q "ids: \[15496, 995\]" <<<"$out" || { echo "interactive output wrong: $out"; status=1; }
exit $status
