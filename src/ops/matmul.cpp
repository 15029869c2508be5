// Linear layers on top of gemm: nn.Linear (weight (OC, C)) and GPT-2 Conv1D (weight (C, OC)).
//
// Forward fuses the bias into the GEMM (oneDNN epilogue for float). Backward:
//   dinp     = dout @ W        (out_in)   or dout @ W^T   (in_out)   beta 0 or 1
//   dweight += dout^T @ inp    (out_in)   or inp^T @ dout (in_out)   beta 1
//   dbias   += column sums of dout, by blocks of rows then over the blocks
//              (deterministic for any thread count).
#include "ops/matmul.h"

#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "ops/gemm.h"

namespace loom {
namespace {

constexpr int64_t k_rows = 32;  // rows per partial bias sum
constexpr int64_t k_cols = 64;  // dbias columns per task when the partials are summed

// dbias += column sums of dout: each block of k_rows rows is summed in row
// order into its own partial, then the partials in block order, so the result
// is the same for any thread count. Both passes read memory in order; summing
// whole columns down the rows instead strode through dout a row apart (2x
// slower at 3072 columns). With dy16 (float only), dout is rounded to bf16 in
// the same pass over it (the bf16 backward reads dout once, and its bias sums
// stay the fp32 ones).
template <typename T>
void bias_backward(T* dbias, const T* dout, int64_t N, int64_t OC, uint16_t* dy16 = nullptr) {
    const int64_t blocks = (N + k_rows - 1) / k_rows;
    thread_local std::vector<T> partials;  // (blocks, OC); grown, never shrunk
    if (int64_t(partials.size()) < blocks * OC) partials.resize(size_t(blocks * OC));
    T* const part = partials.data();
#pragma omp parallel if (N * OC > (1 << 15) && !omp_in_parallel())
    {
#pragma omp for schedule(dynamic, 1)
        for (int64_t k = 0; k < blocks; ++k) {
            T* acc = part + k * OC;
            const int64_t n0 = k * k_rows, n1 = std::min(N, n0 + k_rows);
            std::fill(acc, acc + OC, T(0));
            for (int64_t n = n0; n < n1; ++n) {
                const T* row = dout + n * OC;
#pragma omp simd
                for (int64_t c = 0; c < OC; ++c) acc[c] += row[c];
                if constexpr (std::is_same_v<T, float>)
                    if (dy16 != nullptr) {
                        uint16_t* out = dy16 + n * OC;
#pragma omp simd
                        for (int64_t c = 0; c < OC; ++c) out[c] = f32_to_bf16_bits(row[c]);
                    }
            }
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t c0 = 0; c0 < OC; c0 += k_cols) {
            const int64_t len = std::min(k_cols, OC - c0);
            T acc[k_cols] = {};
            for (int64_t k = 0; k < blocks; ++k) {
                const T* p = part + k * OC + c0;
#pragma omp simd
                for (int64_t c = 0; c < len; ++c) acc[c] += p[c];
            }
            for (int64_t c = 0; c < len; ++c) dbias[c0 + c] += acc[c];
        }
    }
}

}  // namespace

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C,
                    int64_t OC, WeightLayout layout) {
    if (layout == WeightLayout::out_in)
        gemm<T>(false, true, N, OC, C, T(1), inp, C, weight, C, T(0), out, OC, bias);
    else
        gemm<T>(false, false, N, OC, C, T(1), inp, C, weight, OC, T(0), out, OC, bias);
}

template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int64_t N, int64_t C, int64_t OC, WeightLayout layout, bool accumulate_dinp) {
    const T beta_inp = accumulate_dinp ? T(1) : T(0);
    if (layout == WeightLayout::out_in) {
        if (dinp != nullptr)
            gemm<T>(false, false, N, C, OC, T(1), dout, OC, weight, C, beta_inp, dinp, C);
        // dweight null: a frozen weight (LoRA's base), only dinp is wanted.
        if (dweight != nullptr)
            gemm<T>(true, false, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);
    } else {
        if (dinp != nullptr)
            gemm<T>(false, true, N, C, OC, T(1), dout, OC, weight, OC, beta_inp, dinp, C);
        if (dweight != nullptr)
            gemm<T>(true, false, C, OC, N, T(1), inp, C, dout, OC, T(1), dweight, OC);
    }
    if (dbias != nullptr) bias_backward(dbias, dout, N, OC);
}

namespace {

// Grows (never shrinks) a reused bf16 workspace: fresh pages are slow to touch here.
uint16_t* workspace(std::vector<uint16_t>& w, int64_t n) {
    if (int64_t(w.size()) < n) w.resize(size_t(n));
    return w.data();
}

struct Bf16Workspaces {
    std::vector<uint16_t> inp, weight, dout;
};
Bf16Workspaces& bf16_workspaces() {
    thread_local Bf16Workspaces w;
    return w;
}

const uint16_t* rounded_weight(const float* weight, const uint16_t* weight16, int64_t n) {
    if (weight16 != nullptr) return weight16;
    uint16_t* w = workspace(bf16_workspaces().weight, n);
    convert_f32_to_bf16(w, weight, n);
    return w;
}

}  // namespace

void matmul_forward_bf16(float* out, const float* inp, const float* weight, const float* bias,
                         int64_t N, int64_t C, int64_t OC, WeightLayout layout,
                         const uint16_t* weight16, uint16_t* keep_inp16) {
    uint16_t* x = keep_inp16 != nullptr ? keep_inp16 : workspace(bf16_workspaces().inp, N * C);
    convert_f32_to_bf16(x, inp, N * C);
    matmul_forward_bf16_rounded(out, x, weight, bias, N, C, OC, layout, weight16);
}

void matmul_forward_bf16_rounded(float* out, const uint16_t* x, const float* weight,
                                 const float* bias, int64_t N, int64_t C, int64_t OC,
                                 WeightLayout layout, const uint16_t* weight16) {
    const uint16_t* w = rounded_weight(weight, weight16, C * OC);
    if (layout == WeightLayout::out_in)
        gemm_bf16(false, true, N, OC, C, 1.0f, x, C, w, C, 0.0f, out, OC, bias);
    else
        gemm_bf16(false, false, N, OC, C, 1.0f, x, C, w, OC, 0.0f, out, OC, bias);
}

void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC,
                          WeightLayout layout, bool accumulate_dinp, const uint16_t* weight16,
                          const uint16_t* inp16) {
    Bf16Workspaces& ws = bf16_workspaces();
    const uint16_t* x = inp16;
    if (x == nullptr) {
        uint16_t* rounded = workspace(ws.inp, N * C);
        convert_f32_to_bf16(rounded, inp, N * C);
        x = rounded;
    }
    uint16_t* dy = workspace(ws.dout, N * OC);
    if (dbias != nullptr)
        bias_backward(dbias, dout, N, OC, dy);
    else
        convert_f32_to_bf16(dy, dout, N * OC);
    const float beta_inp = accumulate_dinp ? 1.0f : 0.0f;
    if (dinp != nullptr) {
        const uint16_t* w = rounded_weight(weight, weight16, C * OC);
        if (layout == WeightLayout::out_in)
            gemm_bf16(false, false, N, C, OC, 1.0f, dy, OC, w, C, beta_inp, dinp, C);
        else
            gemm_bf16(false, true, N, C, OC, 1.0f, dy, OC, w, OC, beta_inp, dinp, C);
    }
    if (dweight == nullptr) return;  // a frozen weight
    if (layout == WeightLayout::out_in)
        gemm_bf16(true, false, OC, C, N, 1.0f, dy, OC, x, C, 1.0f, dweight, C);
    else
        gemm_bf16(true, false, C, OC, N, 1.0f, x, C, dy, OC, 1.0f, dweight, OC);
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, int64_t,
                                    int64_t, int64_t, WeightLayout);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int64_t,
                                     int64_t, int64_t, WeightLayout);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int64_t, int64_t, int64_t, WeightLayout, bool);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, int64_t, int64_t, int64_t, WeightLayout, bool);

}  // namespace loom
