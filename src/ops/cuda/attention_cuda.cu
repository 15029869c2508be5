// CUDA multi-head attention, forward and backward (semantics of ops/attention.h).
//
// Batched cuBLASLt GEMMs around one fused masked-softmax(+dropout) kernel, as in
// llm.c's attention_forward: q, k, v are first permuted to (B, NH, T, HS) so
// every head is one strided-batch operand. Padding and causal masks, the
// all-masked-row rule (uniform weights), and the attention-dropout key
// (global sample, global head, query, key) are the CPU's. `att` (B, NH, T, T)
// saves the probabilities before dropout; the dropout mask is recomputed in
// backward, whose `scratch` is (B, NH, T, T). For bf16/f16 the scores stay
// fp32 between the GEMM and the softmax; att and the probabilities multiplied
// into v are stored in T, as the CPU stores them in its T.
// AttnMask::key_padding and key_start must point to device memory. Workspace
// for the permuted operands (and fp32 scores) comes from ctx.scratch().
//
// Forward:  Qp, Kp, Vp = permute(q, k, v)              (B, NH, T, HS)
//           att = Qp Kp^T / sqrt(HS)                    batched GEMM into att
//           att = masked_softmax(att); P = dropout(att) one warp per row
//           out = unpermute(P Vp)
// Backward: dVp = P^T dOp;  dP = dOp Vp^T;  dS = att * (dA - rowsum(dA * att)),
//           dA = dropout_backward(dP);  dQp = dS Kp / sqrt(HS);  dKp = dS^T Qp / sqrt(HS)
// A query row with no visible key gets HF's uniform weights (over the causally
// allowed keys plus the unpadded future keys) and sends no gradient to q or k
// (ops/attention.cpp's rules). AttnMask::key_start (device memory) hides the
// keys before each query's document.
// The dropout element of (b, h, i, j) is ((sample_offset + b) * NH_total
// + head_offset + h) * T * T + i * T + j: a head's mask is the same whichever
// tensor-parallel rank owns it.
#include <cmath>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/dropout_math.cuh"
#include "ops/cuda/entries_cuda.h"
#include "ops/cuda/gemm_cuda.h"

namespace loom::cuda {
namespace {

constexpr int k_block = 256;
constexpr int k_rows_per_block = 8;  // softmax: one warp per row

// dst (B, NH, T, HS) <- src rows of stride ld: element (b, t, h*HS + d).
template <typename T>
__global__ void permute_kernel(T* dst, const T* src, int64_t ld, int64_t B, int64_t NH, int64_t Tn,
                               int64_t HS) {
    const int64_t n = B * NH * Tn * HS;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        int64_t d = i % HS, r = i / HS;
        int64_t t = r % Tn;
        r /= Tn;
        int64_t h = r % NH, b = r / NH;
        dst[i] = src[(b * Tn + t) * ld + h * HS + d];
    }
}

// dst rows of stride ld <- src (B, NH, T, HS); the inverse of permute_kernel.
template <typename T>
__global__ void unpermute_kernel(T* dst, const T* src, int64_t ld, int64_t B, int64_t NH,
                                 int64_t Tn, int64_t HS) {
    const int64_t n = B * NH * Tn * HS;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        int64_t d = i % HS, r = i / HS;
        int64_t t = r % Tn;
        r /= Tn;
        int64_t h = r % NH, b = r / NH;
        dst[(b * Tn + t) * ld + h * HS + d] = src[i];
    }
}

struct SoftmaxArgs {
    int64_t B, NH, T;
    int64_t head_offset, NH_total;
    const int64_t* key_padding;  // (B, T) or null
    const int64_t* key_start;    // (B, T) first key of each query's document, or null
    bool causal;
};

// The first key query i of sample b may see (AttnMask::key_start).
__device__ __forceinline__ int64_t first_key(const SoftmaxArgs& a, int64_t b, int64_t i) {
    return a.key_start == nullptr ? 0 : a.key_start[b * a.T + i];
}

// Key j of sample b is not padding.
__device__ __forceinline__ bool pad_visible(const SoftmaxArgs& a, int64_t b, int64_t j) {
    return a.key_padding == nullptr || a.key_padding[b * a.T + j] != 0;
}

// lo = first_key(a, b, i), read once per row.
__device__ __forceinline__ bool key_allowed(const SoftmaxArgs& a, int64_t b, int64_t i, int64_t lo,
                                            int64_t j) {
    if ((a.causal && j > i) || j < lo) return false;
    return pad_visible(a, b, j);
}

__device__ __forceinline__ uint64_t drop_elem(const SoftmaxArgs& a, const DropoutSpec& d, int64_t b,
                                              int64_t h, int64_t i, int64_t j) {
    const uint64_t head = uint64_t(d.sample_offset + b) * uint64_t(a.NH_total) +
                          uint64_t(a.head_offset + h);  // global (sample, head)
    return (head * uint64_t(a.T) + uint64_t(i)) * uint64_t(a.T) + uint64_t(j);
}

// Over B*NH*T rows of T scores: att = masked softmax(scores); when dropout is
// active also writes the dropped, rescaled probabilities to `dropped`. scores
// may alias att (fp32): each element is read before the same thread writes it.
template <typename T, typename S>
__global__ void masked_softmax_kernel(const S* scores, T* att, T* dropped, SoftmaxArgs a,
                                      DropoutSpec d, float drop_scale) {
    const int lane = threadIdx.x % gpu::k_warp;
    const int64_t row = int64_t(blockIdx.x) * k_rows_per_block + threadIdx.x / gpu::k_warp;
    if (row >= a.B * a.NH * a.T) return;
    const int64_t i = row % a.T, bh = row / a.T;
    const int64_t h = bh % a.NH, b = bh / a.NH;
    const S* x = scores + row * a.T;
    T* y = att + row * a.T;
    const int64_t lo = first_key(a, b, i);
    float mx = -INFINITY;
    for (int64_t j = lane; j < a.T; j += gpu::k_warp)
        if (key_allowed(a, b, i, lo, j)) mx = fmaxf(mx, gpu::to_f32(x[j]));
    mx = gpu::warp_max(mx);
    // Every key masked: HF's arithmetic (the CPU's rule, ops/attention.cpp) leaves
    // the causally allowed keys and the unpadded future keys at float32's lowest
    // and the rest at -inf, so the row is uniform over the former. Keys before
    // the document's start are outside the row (weight 0), as on the CPU.
    const bool none = mx == -INFINITY;
    const int64_t limit = a.causal ? i + 1 : a.T;
    float sum = 0.0f, uniform = 0.0f;
    if (none) {
        float n = 0.0f;
        for (int64_t j = lane; j < a.T; j += gpu::k_warp)
            n += j >= lo && (j < limit || pad_visible(a, b, j));
        uniform = 1.0f / gpu::warp_sum(n);
    } else {
        for (int64_t j = lane; j < a.T; j += gpu::k_warp)
            if (key_allowed(a, b, i, lo, j)) sum += expf(gpu::to_f32(x[j]) - mx);
        sum = gpu::warp_sum(sum);
    }
    const float inv = none ? 0.0f : 1.0f / sum;
    for (int64_t j = lane; j < a.T; j += gpu::k_warp) {
        float p = none ? (j >= lo && (j < limit || pad_visible(a, b, j)) ? uniform : 0.0f)
                       : (key_allowed(a, b, i, lo, j) ? expf(gpu::to_f32(x[j]) - mx) * inv : 0.0f);
        T pt = gpu::from_f32<T>(p);
        y[j] = pt;
        if (dropped) {
            bool keep = gpu::dropout_keep(d, drop_elem(a, d, b, h, i, j));
            dropped[row * a.T + j] = gpu::from_f32<T>(keep ? gpu::to_f32(pt) * drop_scale : 0.0f);
        }
    }
}

// dropped = dropout(att), element-wise with the forward's mask.
template <typename T>
__global__ void attention_dropout_kernel(T* dropped, const T* att, SoftmaxArgs a, DropoutSpec d,
                                         float drop_scale) {
    const int64_t n = a.B * a.NH * a.T * a.T;
    for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
         e += int64_t(gridDim.x) * blockDim.x) {
        int64_t j = e % a.T, r = e / a.T;
        int64_t i = r % a.T, bh = r / a.T;
        int64_t h = bh % a.NH, b = bh / a.NH;
        bool keep = gpu::dropout_keep(d, drop_elem(a, d, b, h, i, j));
        dropped[e] = gpu::from_f32<T>(keep ? gpu::to_f32(att[e]) * drop_scale : 0.0f);
    }
}

// In place over rows of datt: dA = dropout_backward(dP); dS = att * (dA - sum(dA * att)).
template <typename T>
__global__ void softmax_backward_kernel(T* datt, const T* att, SoftmaxArgs a, DropoutSpec d,
                                        float drop_scale) {
    const int lane = threadIdx.x % gpu::k_warp;
    const int64_t row = int64_t(blockIdx.x) * k_rows_per_block + threadIdx.x / gpu::k_warp;
    if (row >= a.B * a.NH * a.T) return;
    const int64_t i = row % a.T, bh = row / a.T;
    const int64_t h = bh % a.NH, b = bh / a.NH;
    T* g = datt + row * a.T;
    const T* p = att + row * a.T;
    // A row with no visible key is uniform whatever q and k are: no gradient
    // reaches them through it (the CPU's rule, see ops/attention.cpp).
    const int64_t limit = a.causal ? i + 1 : a.T;
    const int64_t lo = first_key(a, b, i);
    bool any = false;
    for (int64_t j = lane; j < limit && !any; j += gpu::k_warp) any = key_allowed(a, b, i, lo, j);
    if (!__any_sync(0xffffffffu, any)) {
        for (int64_t j = lane; j < a.T; j += gpu::k_warp) g[j] = gpu::from_f32<T>(0.0f);
        return;
    }
    const bool drop = d.p > 0.0f;  // DropoutSpec::active() is host-only
    float dot = 0.0f;
    for (int64_t j = lane; j < a.T; j += gpu::k_warp) {
        float dA = gpu::to_f32(g[j]);
        if (drop) dA = gpu::dropout_keep(d, drop_elem(a, d, b, h, i, j)) ? dA * drop_scale : 0.0f;
        dot += dA * gpu::to_f32(p[j]);
    }
    dot = gpu::warp_sum(dot);
    for (int64_t j = lane; j < a.T; j += gpu::k_warp) {
        float dA = gpu::to_f32(g[j]);
        if (drop) dA = gpu::dropout_keep(d, drop_elem(a, d, b, h, i, j)) ? dA * drop_scale : 0.0f;
        g[j] = gpu::from_f32<T>(gpu::to_f32(p[j]) * (dA - dot));
    }
}

SoftmaxArgs softmax_args(const AttnShape& s, const AttnMask& mask) {
    SoftmaxArgs a;
    a.B = s.B;
    a.NH = s.NH;
    a.T = s.T;
    a.head_offset = s.head_offset;
    a.NH_total = s.NH_total > 0 ? s.NH_total : s.NH;
    a.key_padding = mask.key_padding;
    a.key_start = mask.key_start;
    a.causal = mask.causal;
    return a;
}

void check_shape(const char* who, const AttnShape& s, int64_t ld) {
    LOOM_CUDA_REQUIRE(s.B >= 0 && s.T >= 0 && s.NH > 0 && s.HS > 0 && ld >= s.NH * s.HS,
                      std::string(who) + ": bad shape B=" + std::to_string(s.B) +
                          " T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH) +
                          " HS=" + std::to_string(s.HS) + " ld=" + std::to_string(ld) +
                          " (need ld >= NH*HS)");
}

template <typename T>
void permute(T* dst, const T* src, int64_t ld, const AttnShape& s, CudaContext& ctx) {
    const int64_t n = s.B * s.NH * s.T * s.HS;
    permute_kernel<<<gpu::grid_for(n, k_block), k_block, 0, ctx.stream()>>>(dst, src, ld, s.B, s.NH,
                                                                            s.T, s.HS);
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void unpermute(T* dst, const T* src, int64_t ld, const AttnShape& s, CudaContext& ctx) {
    const int64_t n = s.B * s.NH * s.T * s.HS;
    unpermute_kernel<<<gpu::grid_for(n, k_block), k_block, 0, ctx.stream()>>>(dst, src, ld, s.B,
                                                                              s.NH, s.T, s.HS);
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void attention_forward_cuda(T* out, T* att, const T* q, const T* k, const T* v, int64_t ld,
                            const AttnShape& s, const AttnMask& mask, const DropoutSpec& drop,
                            CudaContext& ctx) {
    check_shape("attention_forward_cuda", s, ld);
    if (s.B == 0 || s.T == 0) return;
    const int64_t BH = s.B * s.NH, THS = s.T * s.HS, TT = s.T * s.T;
    const bool dropping = drop.active();
    // 16-bit types get fp32 scores: the softmax sees the GEMM's fp32 sums
    // unrounded (a bf16 score of 10 is off by up to 0.03, 3% after exp).
    constexpr bool f32_scores = !std::is_same_v<T, float>;
    ScratchCarver plan(nullptr);
    for (int i = 0; i < 4; ++i) plan.take<T>(BH * THS);
    if (dropping) plan.take<T>(BH * TT);
    if (f32_scores) plan.take<float>(BH * TT);
    ScratchCarver carve(ctx.scratch(plan.used()));
    T* Qp = carve.take<T>(BH * THS);
    T* Kp = carve.take<T>(BH * THS);
    T* Vp = carve.take<T>(BH * THS);
    T* Op = carve.take<T>(BH * THS);
    T* dropped = dropping ? carve.take<T>(BH * TT) : nullptr;

    permute(Qp, q, ld, s, ctx);
    permute(Kp, k, ld, s, ctx);
    permute(Vp, v, ld, s, ctx);
    const float scale = 1.0f / std::sqrt(float(s.HS));
    // scores (T, T) = Qp (T, HS) @ Kp^T / sqrt(HS), per (b, h); in att itself for fp32
    float* scores;
    if constexpr (f32_scores) {
        scores = carve.take<float>(BH * TT);
        gemm_batched_f32out_cuda<T>(BH, false, true, s.T, s.T, s.HS, scale, Qp, s.HS, THS, Kp, s.HS,
                                    THS, 0.0f, scores, s.T, TT, ctx);
    } else {
        scores = att;
        gemm_batched_cuda<T>(BH, false, true, s.T, s.T, s.HS, scale, Qp, s.HS, THS, Kp, s.HS, THS,
                             0.0f, att, s.T, TT, ctx);
    }
    const SoftmaxArgs a = softmax_args(s, mask);
    const unsigned rows_grid = unsigned(gpu::ceil_div(BH * s.T, k_rows_per_block));
    masked_softmax_kernel<<<rows_grid, k_rows_per_block * gpu::k_warp, 0, ctx.stream()>>>(
        scores, att, dropped, a, drop, gpu::dropout_scale(drop));
    LOOM_CUDA_CHECK_LAUNCH();
    // Op (T, HS) = P (T, T) @ Vp (T, HS)
    gemm_batched_cuda<T>(BH, false, false, s.T, s.HS, s.T, 1.0f, dropping ? dropped : att, s.T, TT,
                         Vp, s.HS, THS, 0.0f, Op, s.HS, THS, ctx);
    unpermute(out, Op, s.NH * s.HS, s, ctx);
}

template <typename T>
void attention_backward_cuda(T* dq, T* dk, T* dv, T* scratch, const T* dout, const T* att,
                             const T* q, const T* k, const T* v, int64_t ld, const AttnShape& s,
                             const AttnMask& mask, const DropoutSpec& drop, CudaContext& ctx) {
    check_shape("attention_backward_cuda", s, ld);
    if (s.B == 0 || s.T == 0) return;
    const int64_t BH = s.B * s.NH, THS = s.T * s.HS, TT = s.T * s.T;
    ScratchCarver plan(nullptr);
    for (int i = 0; i < 7; ++i) plan.take<T>(BH * THS);
    ScratchCarver carve(ctx.scratch(plan.used()));
    T* Qp = carve.take<T>(BH * THS);
    T* Kp = carve.take<T>(BH * THS);
    T* Vp = carve.take<T>(BH * THS);
    T* dOp = carve.take<T>(BH * THS);
    T* dQp = carve.take<T>(BH * THS);
    T* dKp = carve.take<T>(BH * THS);
    T* dVp = carve.take<T>(BH * THS);

    permute(Qp, q, ld, s, ctx);
    permute(Kp, k, ld, s, ctx);
    permute(Vp, v, ld, s, ctx);
    permute(dOp, dout, s.NH * s.HS, s, ctx);
    const SoftmaxArgs a = softmax_args(s, mask);
    const float drop_scale = gpu::dropout_scale(drop);
    const T* P = att;
    if (drop.active()) {
        attention_dropout_kernel<<<gpu::grid_for(BH * TT, k_block), k_block, 0, ctx.stream()>>>(
            scratch, att, a, drop, drop_scale);
        LOOM_CUDA_CHECK_LAUNCH();
        P = scratch;
    }
    // dVp (T, HS) = P^T (T, T) @ dOp (T, HS)
    gemm_batched_cuda<T>(BH, true, false, s.T, s.HS, s.T, 1.0f, P, s.T, TT, dOp, s.HS, THS, 0.0f,
                         dVp, s.HS, THS, ctx);
    // dP (T, T) = dOp (T, HS) @ Vp^T, written over the dropped probabilities (no longer needed)
    gemm_batched_cuda<T>(BH, false, true, s.T, s.T, s.HS, 1.0f, dOp, s.HS, THS, Vp, s.HS, THS, 0.0f,
                         scratch, s.T, TT, ctx);
    const unsigned rows_grid = unsigned(gpu::ceil_div(BH * s.T, k_rows_per_block));
    softmax_backward_kernel<<<rows_grid, k_rows_per_block * gpu::k_warp, 0, ctx.stream()>>>(
        scratch, att, a, drop, drop_scale);
    LOOM_CUDA_CHECK_LAUNCH();
    const float scale = 1.0f / std::sqrt(float(s.HS));
    // dQp (T, HS) = dS (T, T) @ Kp (T, HS) / sqrt(HS);  dKp = dS^T @ Qp / sqrt(HS)
    gemm_batched_cuda<T>(BH, false, false, s.T, s.HS, s.T, scale, scratch, s.T, TT, Kp, s.HS, THS,
                         0.0f, dQp, s.HS, THS, ctx);
    gemm_batched_cuda<T>(BH, true, false, s.T, s.HS, s.T, scale, scratch, s.T, TT, Qp, s.HS, THS,
                         0.0f, dKp, s.HS, THS, ctx);
    unpermute(dq, dQp, ld, s, ctx);
    unpermute(dk, dKp, ld, s, ctx);
    unpermute(dv, dVp, ld, s, ctx);
}

}  // namespace

void attention_forward(const OpCtx& c, DType operands, void* y, void* att, const void* q,
                       const void* k, const void* v, int64_t ld, const AttnShape& s,
                       const AttnMask& m, const DropoutSpec& d) {
    check_attention(c, operands, m, "attention_forward");
    with_act(c, "attention_forward", [&](auto t) {
        using T = decltype(t);
        attention_forward_cuda<T>(P<T>(y), P<T>(att), P<T>(q), P<T>(k), P<T>(v), ld, s, m, d,
                                  context(c));
    });
}

void attention_backward(const OpCtx& c, DType operands, void* dq, void* dk, void* dv, void* scratch,
                        const void* dy, const void* att, const void* q, const void* k,
                        const void* v, int64_t ld, const AttnShape& s, const AttnMask& m,
                        const DropoutSpec& d) {
    check_attention(c, operands, m, "attention_backward");
    with_act(c, "attention_backward", [&](auto t) {
        using T = decltype(t);
        attention_backward_cuda<T>(P<T>(dq), P<T>(dk), P<T>(dv), P<T>(scratch), P<T>(dy), P<T>(att),
                                   P<T>(q), P<T>(k), P<T>(v), ld, s, m, d, context(c));
    });
}

}  // namespace loom::cuda
