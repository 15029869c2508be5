// fp16 mixed-precision linear layers (matmul.h): operands and results rounded
// to fp16, GEMMs in fp32 on the rounded values. Rounding uses the F16C
// conversion instructions where the CPU has them (8 lanes at a time) and
// _Float16 otherwise; both round to nearest even and saturate to inf.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "ops/matmul.h"

namespace loom {

namespace {

__attribute__((target("avx,f16c"))) void round_f16c(float* out, const float* in, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; ++i) out[i] = float(_Float16(in[i]));
}

void round_scalar(float* out, const float* in, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = float(_Float16(in[i]));
}

bool have_f16c() {
    static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
    return yes;
}

// Grows (never shrinks) a reused workspace: fresh pages are slow to touch.
float* workspace(std::vector<float>& w, int64_t n) {
    if (int64_t(w.size()) < n) w.resize(size_t(n));
    return w.data();
}

struct Fp16Workspaces {
    std::vector<float> inp, weight, dout, dinp, dweight, dbias;
};
Fp16Workspaces& fp16_workspaces() {
    thread_local Fp16Workspaces w;
    return w;
}

}  // namespace

void round_to_fp16(float* out, const float* in, int64_t n) {
    if (have_f16c())
        round_f16c(out, in, n);
    else
        round_scalar(out, in, n);
}

void round_to_fp16(float* x, int64_t n) {
    round_to_fp16(x, x, n);
}

void matmul_forward_fp16(float* out, const float* inp, const float* weight, const float* bias,
                         int64_t N, int64_t C, int64_t OC, WeightLayout layout) {
    Fp16Workspaces& ws = fp16_workspaces();
    float* x = workspace(ws.inp, N * C);
    float* w = workspace(ws.weight, C * OC);
    round_to_fp16(x, inp, N * C);
    round_to_fp16(w, weight, C * OC);
    matmul_forward(out, x, w, bias, N, C, OC, layout);
    round_to_fp16(out, N * OC);
}

void matmul_backward_fp16(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC,
                          WeightLayout layout, bool accumulate_dinp) {
    Fp16Workspaces& ws = fp16_workspaces();
    float* x = workspace(ws.inp, N * C);
    float* dy = workspace(ws.dout, N * OC);
    float* w = workspace(ws.weight, C * OC);
    // A frozen weight (dweight null) still passes its input gradient on.
    float* dw = dweight != nullptr ? workspace(ws.dweight, C * OC) : nullptr;
    round_to_fp16(x, inp, N * C);
    round_to_fp16(dy, dout, N * OC);
    round_to_fp16(w, weight, C * OC);
    // This call's gradients are fp16 tensors in autocast: round them alone,
    // then add them to the fp32 accumulators (.grad and a shared input's dx).
    float* dx = dinp != nullptr ? workspace(ws.dinp, N * C) : nullptr;
    if (dw != nullptr) std::fill(dw, dw + C * OC, 0.0f);
    matmul_backward(dx, dw, static_cast<float*>(nullptr), dy, x, w, N, C, OC, layout, false);
    if (dw != nullptr) {
        round_to_fp16(dw, C * OC);
        for (int64_t i = 0; i < C * OC; ++i) dweight[i] += dw[i];
    }
    if (dinp != nullptr) {
        round_to_fp16(dx, N * C);
        if (accumulate_dinp)
            for (int64_t i = 0; i < N * C; ++i) dinp[i] += dx[i];
        else
            std::copy(dx, dx + N * C, dinp);
    }
    if (dbias != nullptr) {
        // The bias gradient is a reduction of the fp16 output gradient.
        float* db = workspace(ws.dbias, OC);
        std::fill(db, db + OC, 0.0f);
        for (int64_t n = 0; n < N; ++n)
            for (int64_t o = 0; o < OC; ++o) db[o] += dy[n * OC + o];
        round_to_fp16(db, OC);
        for (int64_t o = 0; o < OC; ++o) dbias[o] += db[o];
    }
}

}  // namespace loom
