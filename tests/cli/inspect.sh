#!/usr/bin/env bash
# `loom inspect`: lists fixture tensors with the right dtype and shape, prints
# stats that match the batch's known contents, reports NaN/Inf, and turns
# corrupt or missing files into exit status 1 with a message naming the file.
# Usage: inspect.sh LOOM_BINARY TESTS_DATA_DIR
set -u
loom=$1
data=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# expect_line OUTPUT REGEX WHAT
expect_line() { grep -Eq -- "$2" <<<"$1" || fail "$3: no line matching '$2' in:"$'\n'"$1"; }

model=$data/hf/bert-cls/model.safetensors
out=$("$loom" inspect "$model") || fail "inspect $model exited $?"
expect_line "$out" '^bert\.pooler\.dense\.weight +F32 +\[64, 64\] +4096$' "pooler weight"
expect_line "$out" '^bert\.embeddings\.word_embeddings\.weight +F32 +\[1000, 64\] +64000$' "word embeddings"
expect_line "$out" '^metadata format = pt$' "metadata"
expect_line "$out" '^total: 139651 elements in 41 tensors$' "total"

out=$("$loom" inspect "$data/hf/bert-cls/batch.safetensors" --stats) || fail "inspect --stats exited $?"
# labels are [2, 2, 1]; the attention mask is 0/1 with 5 pads in 48 positions.
expect_line "$out" '^labels +I64 +\[3\] +3 +1 +2 +1\.66667$' "labels stats"
expect_line "$out" '^attention_mask +I64 +\[3, 16\] +48 +0 +1 +0\.895833$' "mask stats"

out=$("$loom" inspect "$data/hf/gpt2-lm/expected.safetensors" --filter loss --stats) || fail "filter exited $?"
expect_line "$out" '^1 tensors match .loss.$' "filter count"
expect_line "$out" '^loss +F32 +\[\] +1 ' "scalar loss"

# A hand-built file holding NaN, +Inf and 1.0 (F32 little-endian).
header='{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}}'
{
    printf "\\x$(printf %02x ${#header})\\0\\0\\0\\0\\0\\0\\0"
    printf '%s' "$header"
    printf '\x00\x00\xc0\x7f\x00\x00\x80\x7f\x00\x00\x80\x3f'
} > "$tmp/nan.safetensors"
out=$("$loom" inspect "$tmp/nan.safetensors" --stats) || fail "inspect nan file exited $?"
expect_line "$out" '^x +F32 +\[3\] +3 +1 +1 +1 +nan=1 +inf=1$' "nan/inf counts"

# Corrupt files: exit status 1 and a message naming the file (and tensor).
size=$(stat -c %s "$model")
head -c 100 "$model" > "$tmp/cut_header.safetensors"
head -c $((size - 4)) "$model" > "$tmp/cut_data.safetensors"
for f in cut_header cut_data; do
    "$loom" inspect "$tmp/$f.safetensors" > /dev/null 2> "$tmp/err"
    rc=$?
    [ "$rc" -eq 1 ] || fail "$f: exit status $rc, expected 1"
    grep -q "$tmp/$f.safetensors" "$tmp/err" || fail "$f: message does not name the file: $(cat "$tmp/err")"
done
"$loom" inspect "$tmp/cut_header.safetensors" 2>&1 | grep -q "runs past the end of the file" \
    || fail "cut_header: wrong message"
"$loom" inspect "$tmp/cut_data.safetensors" 2>&1 | grep -q "tensor '[a-z_.0-9]*': data_offsets .* run past the end of the data" \
    || fail "cut_data: message does not name the tensor"

"$loom" inspect "$tmp/absent.safetensors" > /dev/null 2> "$tmp/err"
rc=$?
[ "$rc" -eq 1 ] || fail "missing file: exit status $rc, expected 1"
grep -q "absent.safetensors.*No such file or directory" "$tmp/err" || fail "missing file: $(cat "$tmp/err")"

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed" >&2
    exit 1
fi
echo "inspect: all checks passed"
