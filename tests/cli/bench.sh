#!/usr/bin/env bash
# `loom bench`: one JSON line with the fields bench/gpu/loom_vs_hf.sh reads,
# consistent with each other (tokens/s = batch x seq / step time, llm.c's
# flops-per-token formula), a random-init loss near ln(vocab), and clear errors
# for a bad model, task, dtype or a device this build lacks.
# Usage: bench.sh LOOM_BINARY TESTS_DATA_DIR
set -u
loom=$1
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
err_file=$(mktemp)
trap 'rm -f "$err_file"' EXIT

check_json() {  # JSON_LINE MODEL TASK BATCH SEQ LAYERS HEADS HIDDEN
    python3 - "$@" <<'PY' || fail "bench $2: $1"
import json, math, sys
line, model, task, B, T, L, H, C = sys.argv[1:]
B, T, L, H, C = map(int, (B, T, L, H, C))
r = json.loads(line)
assert r["side"] == "loom" and r["model"] == model and r["task"] == task, r
assert r["batch"] == B and r["seq"] == T, r
assert r["step_ms"] > 0 and r["peak_mem_gib"] > 0, r
assert abs(r["tokens_per_s"] - B * T / (r["step_ms"] / 1e3)) <= 1e-3 * r["tokens_per_s"] + 0.1, r
want = 6 * r["params"] + 12 * L * H * (C // H) * T
assert abs(r["flops_per_token"] - want) <= 1e-5 * want, (r["flops_per_token"], want)
# The CPU's peak is measured (null only on a build without AVX2/AVX-512 FMA).
if r["peak_tflops"] is None:
    assert r["mfu"] is None and r["peak_source"] is None, r
else:
    assert r["peak_source"].startswith("measured: "), r
    assert 0 < r["mfu"] <= 1, r
    want_mfu = r["flops_per_token"] * r["tokens_per_s"] / (r["peak_tflops"] * 1e12)
    assert abs(r["mfu"] - want_mfu) <= 1e-3 * want_mfu + 1e-4, (r["mfu"], want_mfu)
# Random weights with std 0.02 give near-uniform logits over the 1000 ids.
assert abs(r["loss"] - math.log(1000)) < 0.3, r["loss"]
PY
}

for dtype in fp32 bf16; do
    out=$("$loom" bench --model tiny-bert --seq 32 --batch 4 --steps 2 --warmup 1 --dtype $dtype 2>"$err_file") ||
        fail "tiny-bert $dtype exited $?"
    check_json "$out" tiny-bert masked-lm 4 32 2 4 64
    # bf16 GEMMs run in fp32 on a CPU without oneDNN bf16 kernels: said on stderr and
    # in peak_source, never one without the other.
    noted=0 sourced=0
    grep -q "no bf16 GEMM kernels" "$err_file" && noted=1
    grep -q "bf16 GEMMs run in fp32" <<<"$out" && sourced=1
    [ "$noted" = "$sourced" ] || fail "$dtype: stderr note $noted, peak_source note $sourced: $out"
    [ "$dtype" = bf16 ] || [ "$noted" = 0 ] || fail "fp32 run mentions the bf16 fallback"
done
out=$("$loom" bench --model tiny-gpt2 --seq 48 --batch 2 --steps 2 --warmup 0 2>/dev/null) ||
    fail "tiny-gpt2 exited $?"
check_json "$out" tiny-gpt2 causal-lm 2 48 2 4 64
[ "$(wc -l <<<"$out")" = 1 ] || fail "stdout is not exactly one line: $out"

# A model folder works too (its dropout switched off), with the task overridden.
out=$("$loom" bench --model "$2/hf/bert-cls" --task masked-lm --seq 16 --batch 2 --steps 1 2>/dev/null) ||
    fail "bench on a model folder exited $?"
grep -q '"task":"masked-lm"' <<<"$out" || fail "folder + --task masked-lm: $out"

expect_error() {  # REGEX ARGS...
    local want=$1
    shift
    local err
    if err=$("$loom" bench "$@" 2>&1 >/dev/null); then
        fail "bench $* succeeded"
    elif ! grep -Eq -- "$want" <<<"$err"; then
        fail "bench $*: expected /$want/, got: $err"
    fi
}
expect_error "--model nope: neither a preset" --model nope
expect_error "--task sequence-classification: expected masked-lm or causal-lm" --model tiny-bert --task sequence-classification
expect_error "--dtype fp8: expected bf16 or fp32" --model tiny-bert --dtype fp8
expect_error "--seq 4096 exceeds the model's 512 positions" --model tiny-bert --seq 4096
if ! "$loom" bench --help | grep -q "cuda-release\|--device"; then fail "--help lacks --device"; fi
if [ -z "$("$loom" bench --model tiny-bert --steps 1 --device cuda 2>&1 >/dev/null | grep -E 'built without CUDA|no usable CUDA device' )" ]; then
    fail "--device cuda without a GPU or CUDA build gave no clear error"
fi

[ "$failures" = 0 ] && echo "bench: all checks passed"
exit "$failures"
