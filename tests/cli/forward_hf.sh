#!/usr/bin/env bash
# `loom forward` on real fixtures: the output file has the documented keys and
# shapes, parity with the HF reference passes, a forward-only QA run writes
# start/end logits and no gradients, and a bad --model path fails with exit 1
# and a message naming the missing config.json.
# Usage: forward_hf.sh LOOM_BINARY TESTS_DATA_DIR
set -u
loom=$1
data=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
expect_line() { grep -Eq -- "$2" <<<"$1" || fail "$3: no line matching '$2' in:"$'\n'"$1"; }

fx=$data/hf/bert-mlm
out=$("$loom" forward --model "$fx" --batch "$fx/batch.safetensors" --out "$tmp/out.safetensors" \
      --adamw-step --compare "$fx/expected.safetensors" --compare-after "$fx/after_adamw.safetensors" 2>&1) \
    || fail "forward bert-mlm exited $?: $out"
expect_line "$out" '^parity: .* PASS$' "parity line"
expect_line "$out" '^loss: 7\.457' "loss printed"
[[ -s "$tmp/out.safetensors" ]] || fail "no output file"

keys=$("$loom" inspect "$tmp/out.safetensors") || fail "inspect output exited $?"
expect_line "$keys" '^logits +F32 +\[3, 16, 1000\] ' "logits"
expect_line "$keys" '^loss +F32 +\[\] +1$' "loss"
for i in 0 1 2; do expect_line "$keys" "^hidden_states\.$i +F32 +\[3, 16, 64\] " "hidden_states.$i"; done
expect_line "$keys" '^grad\.bert\.embeddings\.word_embeddings\.weight +F32 +\[1000, 64\] ' "word grad"
expect_line "$keys" '^grad\.cls\.predictions\.bias +F32 +\[1000\] ' "bias grad"
expect_line "$keys" '^after\.bert\.encoder\.layer\.1\.output\.LayerNorm\.bias +F32 +\[64\] ' "after"
# One grad.* and one after.* per stored parameter; tied names are not repeated.
n_params=$("$loom" inspect "$fx/model.safetensors" | grep -Ec '^[a-z].* F32 ')
n_grads=$(grep -Ec '^grad\.' <<<"$keys")
n_after=$(grep -Ec '^after\.' <<<"$keys")
[[ $n_grads == "$n_params" ]] || fail "$n_grads grad.* tensors for $n_params parameters"
[[ $n_after == "$n_params" ]] || fail "$n_after after.* tensors for $n_params parameters"
grep -q 'grad\.cls\.predictions\.decoder' <<<"$keys" && fail "tied decoder written separately"

# QA, forward only: start/end logits, no gradients.
fx=$data/hf/bert-qa
"$loom" forward --model "$fx" --batch "$fx/batch.safetensors" --out "$tmp/qa.safetensors" >/dev/null \
    || fail "forward bert-qa exited $?"
keys=$("$loom" inspect "$tmp/qa.safetensors")
expect_line "$keys" '^start_logits +F32 +\[3, 16\] ' "start_logits"
expect_line "$keys" '^end_logits +F32 +\[3, 16\] ' "end_logits"
grep -q '^grad\.' <<<"$keys" && fail "gradients written without --backward"

# A wrong reference makes --compare fail with exit 1.
"$loom" forward --model "$data/hf/bert-cls" --batch "$data/hf/bert-cls/batch.safetensors" \
    --compare "$data/hf/roberta-cls/expected.safetensors" >"$tmp/log" 2>&1
rc=$?
[[ $rc == 1 ]] || fail "mismatched --compare exited $rc, expected 1"
expect_line "$(cat "$tmp/log")" 'parity: .* FAIL$' "FAIL line"

# Bad model path: exit 1, the message names the missing file.
"$loom" forward --model "$tmp/no-such-model" --batch "$fx/batch.safetensors" >"$tmp/log" 2>&1
rc=$?
[[ $rc == 1 ]] || fail "bad --model exited $rc, expected 1"
expect_line "$(cat "$tmp/log")" "^loom: error: .*$tmp/no-such-model/config.json" "bad model message"

# Batch missing the labels --backward needs: exit 1 naming the file and key.
"$loom" forward --model "$data/hf/bert-cls" --batch "$data/hf/bert-qa/batch.safetensors" --backward \
    >"$tmp/log" 2>&1
rc=$?
[[ $rc == 1 ]] || fail "batch without labels exited $rc, expected 1"
expect_line "$(cat "$tmp/log")" "bert-qa/batch.safetensors.*labels" "missing labels message"

help=$("$loom" forward --help) || fail "--help exited $?"
expect_line "$help" 'hidden_states\.<i>' "help documents outputs"
expect_line "$help" '--adamw-step' "help lists --adamw-step"

if [[ $failures -gt 0 ]]; then
    echo "$failures failure(s)" >&2
    exit 1
fi
echo "forward_hf: all checks passed"
