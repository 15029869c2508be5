// Fused (FlashAttention-2) multi-head attention on CUDA, forward and backward,
// with the semantics of ops/attention.h: scale 1/sqrt(HS), key-padding and
// causal masks, and attention-probability dropout keyed by (global sample,
// global head, query, key), so the kept mask is the CPU's and the unfused
// CUDA path's.
//
// Memory: the unfused path (attention_cuda.cu) saves the (B, NH, T, T)
// probabilities of every layer for backward (192 MiB per layer in bf16 for
// GPT-2 small at B = 8, T = 1024) and needs as much again as workspace. These
// kernels keep query and key tiles in shared memory, run the softmax online,
// and save only the per-row log-sum-exp of the scaled scores, (B, NH, T) fp32
// (384 KiB per layer in that example); backward recomputes the probabilities
// from it. Backward's only workspace is D = rowsum(dout * out), (B, NH, T)
// fp32 from ctx.scratch().
//
// Precondition: every query row has at least one visible key. The CPU gives a
// row with every key masked uniform weights by HF's rule (ops/attention.cpp);
// these kernels do not implement that rule. Check with
// attention_every_row_has_a_key() (ops/attention.h) and take the unfused path when it fails.
// (Such a row comes out of the kernels as zeros with lse = -inf and sends no
// gradient anywhere, never as NaN.)
//
// Determinism: no atomics. dK/dV come from one kernel over key tiles and dQ
// from another over query tiles, so every output element is written once by
// one thread with a fixed summation order: bit-identical run to run.
//
// q, k, v (and dq, dk, dv) are (B, T, NH*HS) views with row stride `ld`, e.g.
// GPT-2's packed (B*T, 3C) c_attn output with ld = 3C. out and dout are
// contiguous (B, T, NH*HS). AttnMask::key_padding and key_start must point to
// device memory.
// dq/dk/dv must not overlap q, k, v, out or dout (they may share one packed
// buffer among themselves).
//
// Head sizes with compiled kernels: HS in {16, 32, 64, 80, 96, 128}. The head
// size is a template parameter (register tiles, unrolled 16-wide tensor-core
// steps), so it must be a multiple of 16 and at most 128, and each value costs
// compile time; others take the unfused path. Any B, T >= 0, NH and ld work.
//
// After FlashAttention-2, every kernel runs 4 warps (128 threads) on a block of 64 rows, 16 rows
// per warp, and streams tiles of N columns through shared memory: N = 64 for bf16/f16 (tensor
// cores, nvcuda::wmma 16x16x16 with fp32 accumulation) and N = 32 for fp32 (SIMT), whose 4-byte
// tiles would otherwise outgrow an A100's 163 KiB of shared memory per block. At HS = 128 a block
// takes 77 / 121 / 111 KiB (forward / dK-dV / dQ) in bf16/f16 and 84 / 135 / 126 KiB in fp32.
//   forward  rows = queries, columns = keys:    S = Q K^T, online softmax,
//                                               O += P V
//   dK/dV    rows = keys, columns = queries:    S^T = K Q^T, dP^T = V dO^T,
//                                               dV += P^T dO, dK += dS^T Q
//   dQ       rows = queries, columns = keys:    S, dP as above, dQ += dS K
// with P = exp(S / sqrt(HS) - lse), dS = P * (dP * M - D), M the dropout
// multipliers and D = rowsum(dout * out) (the CPU's <P M, dP>).
//
// Within a warp the element-wise work maps lane l to row l / 2 and to the
// columns c = l % 2, l % 2 + 2, ...: a row's statistics are one shuffle apart.
// The first product of each pass leaves its 16 x N fp32 tile in the warp's own
// shared memory; the second accumulates 16 x HS in registers (wmma fragments,
// or HS / 2 floats per lane for fp32) and takes its left operand (P or dS,
// rounded to T as the unfused path rounds the probabilities) from shared
// memory. wmma does not expose which lane holds which accumulator element, so
// per-row work on an accumulator (the online softmax's rescale, the final
// 1/l) stages it through shared memory 16 columns at a time.
//
// AttnMask::key_start (packed documents) hides, per query, the keys before its
// document: each kernel tests it per element next to the causal test, so the
// tiles skipped stay the causal ones.
//
// Tile rows past T are zero-filled: a masked probability is exactly 0, but
// 0 * NaN from uninitialised shared memory would not be.
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/dropout_math.cuh"
#include "ops/cuda/entries_cuda.h"
#include "ops/cuda/flash_attention_backward.cuh"
#include "ops/cuda/flash_attention_tiles.cuh"

namespace loom {
namespace {

using namespace flash;

// Grid (B * NH, query tiles of k_rows); writes out and lse.
template <typename T, int HS>
__global__ void __launch_bounds__(k_threads) flash_forward_kernel(const FlashArgs<T> a) {
    using D = Dims<T, HS>;
    constexpr int N = D::N;
    extern __shared__ __align__(128) unsigned char flash_smem[];
    const ForwardSmem<T, HS> sm(flash_smem);
    const int warp = threadIdx.x / gpu::k_warp, lane = threadIdx.x % gpu::k_warp;
    const int r = lane >> 1, half = lane & 1;
    const int64_t bh = blockIdx.x, b = bh / a.NH, h = bh % a.NH;
    const int64_t q0 = int64_t(blockIdx.y) * k_rows;
    const int64_t w0 = q0 + warp * k_frag;  // the warp's first query
    const int64_t i = w0 + r;               // this lane's query
    const int64_t row0 = b * a.Tn;          // sample b's first row
    const int64_t col = h * HS;

    load_tile<T, HS>(sm.q, D::ld_t, a.q + (row0 + q0) * a.ld + col, a.ld, k_rows,
                     int(std::min<int64_t>(k_rows, a.Tn - q0)), a.vec16);
    float* s_w = sm.s + warp * k_frag * D::ld_s;
    T* p_w = sm.p + warp * k_frag * D::ld_p;
    const T* q_w = sm.q + warp * k_frag * D::ld_t;

    WarpAcc<T, HS> acc;
    acc.zero();
    float m_run = -INFINITY, l_run = 0.0f;
    DropDraws draws(a.drop);
    const uint64_t drop_row =
        a.dropping ? drop_head_base(a, b, h) + uint64_t(i) * uint64_t(a.Tn) : 0;
    const int64_t lo = a.key_start != nullptr && i < a.Tn ? a.key_start[row0 + i] : 0;

    int64_t n_tiles = (a.Tn + N - 1) / N;
    // Causal: key tiles wholly above the block's last query are skipped.
    if (a.causal) n_tiles = std::min<int64_t>(n_tiles, (q0 + k_rows - 1) / N + 1);
    for (int64_t t = 0; t < n_tiles; ++t) {
        const int64_t k0 = t * N;
        const int kvalid = int(std::min<int64_t>(N, a.Tn - k0));
        __syncthreads();  // the previous tiles are consumed
        load_tile<T, HS>(sm.k, D::ld_t, a.k + (row0 + k0) * a.ld + col, a.ld, N, kvalid, a.vec16);
        load_tile<T, HS>(sm.v, D::ld_t, a.v + (row0 + k0) * a.ld + col, a.ld, N, kvalid, a.vec16);
        for (int c = threadIdx.x; c < N; c += k_threads)
            sm.vis[c] = c < kvalid && key_unpadded(a.key_padding, b, a.Tn, k0 + c);
        __syncthreads();
        // Warp-uniform: rows past T, or every key of the tile causally hidden.
        if (w0 >= a.Tn || (a.causal && k0 > w0 + k_frag - 1)) continue;

        warp_scores<T, HS>(s_w, q_w, sm.k);
        float mx = -INFINITY;
#pragma unroll 4
        for (int cc = 0; cc < N / 2; ++cc) {
            const int c = 2 * cc + half;
            const bool ok = sm.vis[c] && i < a.Tn && (!a.causal || k0 + c <= i) && k0 + c >= lo;
            if (ok) mx = fmaxf(mx, s_w[r * D::ld_s + c] * a.scale);
        }
        mx = fmaxf(mx, __shfl_xor_sync(k_full, mx, 1));
        const float m_new = fmaxf(m_run, mx);
        // No visible key yet: probabilities and the accumulator stay 0 (and
        // exp(-inf - -inf) would be NaN).
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        const float alpha = expf(m_run - m_use);
        float sum = 0.0f;
#pragma unroll 4
        for (int cc = 0; cc < N / 2; ++cc) {
            const int c = 2 * cc + half;
            const bool ok = sm.vis[c] && i < a.Tn && (!a.causal || k0 + c <= i) && k0 + c >= lo;
            float p = ok ? expf(s_w[r * D::ld_s + c] * a.scale - m_use) : 0.0f;
            sum += p;
            if (a.dropping && ok)
                p = draws.keep(drop_row + uint64_t(k0 + c)) ? p * a.drop_scale : 0.0f;
            p_w[r * D::ld_p + c] = gpu::from_f32<T>(p);
        }
        sum += __shfl_xor_sync(k_full, sum, 1);
        l_run = l_run * alpha + sum;
        m_run = m_new;
        __syncwarp();  // s_w is read (it stages the rescale), p_w is written
        acc.scale_rows(alpha, s_w);
        acc.add(p_w, sm.v);
    }
    __syncwarp();
    // A row without a visible key (outside the precondition) gets zeros and
    // lse = -inf, which backward turns into zero gradients.
    const float inv_l = l_run > 0.0f ? 1.0f / l_run : 0.0f;
    const int valid = int(std::clamp<int64_t>(a.Tn - w0, 0, k_frag));
    if (valid > 0) acc.store(a.out + (row0 + w0) * a.C + col, a.C, valid, inv_l, s_w);
    if (half == 0 && i < a.Tn)
        a.lse_out[bh * a.Tn + i] = l_run > 0.0f ? m_run + logf(l_run) : -INFINITY;
}

// ---- host ---------------------------------------------------------------------

constexpr int k_head_sizes[] = {16, 32, 64, 80, 96, 128};

template <typename F>
void dispatch_head_size(int64_t HS, F&& f) {
    switch (HS) {
        case 16:
            f(std::integral_constant<int, 16>{});
            return;
        case 32:
            f(std::integral_constant<int, 32>{});
            return;
        case 64:
            f(std::integral_constant<int, 64>{});
            return;
        case 80:
            f(std::integral_constant<int, 80>{});
            return;
        case 96:
            f(std::integral_constant<int, 96>{});
            return;
        case 128:
            f(std::integral_constant<int, 128>{});
            return;
        default:
            LOOM_CUDA_REQUIRE(false,
                              "flash attention: no kernel for head size " + std::to_string(HS));
    }
}

bool aligned16(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

void check_shape(const char* who, const AttnShape& s, int64_t ld) {
    const int64_t nh_total = s.NH_total > 0 ? s.NH_total : s.NH;
    LOOM_CUDA_REQUIRE(s.B >= 0 && s.T >= 0 && s.NH > 0 && s.HS > 0 && ld >= s.NH * s.HS,
                      std::string(who) + ": bad shape B=" + std::to_string(s.B) +
                          " T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH) +
                          " HS=" + std::to_string(s.HS) + " ld=" + std::to_string(ld) +
                          " (need ld >= NH*HS)");
    LOOM_CUDA_REQUIRE(s.head_offset >= 0 && s.head_offset + s.NH <= nh_total,
                      std::string(who) + ": heads [" + std::to_string(s.head_offset) + ", " +
                          std::to_string(s.head_offset + s.NH) + ") outside NH_total " +
                          std::to_string(nh_total));
    LOOM_CUDA_REQUIRE(cuda::fused_attention_supported(s),
                      std::string(who) + ": no kernel for head size " + std::to_string(s.HS) +
                          " (fused_attention_supported)");
    LOOM_CUDA_REQUIRE(s.B * s.NH <= int64_t(INT32_MAX) && (s.T + k_rows - 1) / k_rows <= 65535,
                      std::string(who) + ": grid too large for B*NH=" + std::to_string(s.B * s.NH) +
                          ", T=" + std::to_string(s.T));
}

template <typename T>
FlashArgs<T> make_args(const T* q, const T* k, const T* v, int64_t ld, const AttnShape& s,
                       const AttnMask& mask, const DropoutSpec& drop) {
    FlashArgs<T> a{};
    a.q = q;
    a.k = k;
    a.v = v;
    a.ld = ld;
    a.key_padding = mask.key_padding;
    a.key_start = mask.key_start;
    a.B = s.B;
    a.Tn = s.T;
    a.NH = s.NH;
    a.C = s.NH * s.HS;
    a.head_offset = s.head_offset;
    a.NH_total = s.NH_total > 0 ? s.NH_total : s.NH;
    a.causal = mask.causal;
    a.vec16 = aligned16(q) && aligned16(k) && aligned16(v) && (ld * int64_t(sizeof(T))) % 16 == 0;
    a.scale = 1.0f / std::sqrt(float(s.HS));
    a.dropping = drop.active();
    a.drop_scale = gpu::dropout_scale(drop);
    a.drop = drop;
    return a;
}

// Opts the kernel into `bytes` of dynamic shared memory (past the default 48 KiB).
template <typename K>
void prepare_smem(K kernel, size_t bytes, CudaContext& ctx) {
    int optin = 0;
    LOOM_CUDA_CHECK(
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx.device()));
    LOOM_CUDA_REQUIRE(bytes <= size_t(optin),
                      "flash attention: needs " + std::to_string(bytes) +
                          " bytes of shared memory per block, the device allows " +
                          std::to_string(optin));
    LOOM_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

dim3 grid_of(const AttnShape& s) {
    return dim3(unsigned(s.B * s.NH), unsigned((s.T + k_rows - 1) / k_rows));
}

template <typename T>
void flash_attention_forward_cuda(T* out, float* lse, const T* q, const T* k, const T* v,
                                  int64_t ld, const AttnShape& s, const AttnMask& mask,
                                  const DropoutSpec& drop, CudaContext& ctx) {
    check_shape("flash_attention_forward_cuda", s, ld);
    if (s.B == 0 || s.T == 0) return;
    FlashArgs<T> a = make_args(q, k, v, ld, s, mask, drop);
    a.out = out;
    a.lse_out = lse;
    dispatch_head_size(s.HS, [&](auto hs) {
        constexpr int HS = decltype(hs)::value;
        const size_t bytes = ForwardSmem<T, HS>(nullptr).bytes;
        const auto kernel = &flash_forward_kernel<T, HS>;
        prepare_smem(kernel, bytes, ctx);
        kernel<<<grid_of(s), k_threads, bytes, ctx.stream()>>>(a);
        LOOM_CUDA_CHECK_LAUNCH();
    });
}

template <typename T>
void flash_attention_backward_cuda(T* dq, T* dk, T* dv, const T* dout, const T* out,
                                   const float* lse, const T* q, const T* k, const T* v, int64_t ld,
                                   const AttnShape& s, const AttnMask& mask,
                                   const DropoutSpec& drop, CudaContext& ctx) {
    check_shape("flash_attention_backward_cuda", s, ld);
    if (s.B == 0 || s.T == 0) return;
    const int64_t rows = s.B * s.T * s.NH;
    float* dsum = static_cast<float*>(ctx.scratch(size_t(rows) * sizeof(float)));
    {
        constexpr int block = 256;
        const int64_t per_block = block / gpu::k_warp;
        const auto dsum_kernel = &flash_dsum_kernel<T>;
        dsum_kernel<<<unsigned(gpu::ceil_div(rows, per_block)), block, 0, ctx.stream()>>>(
            dsum, dout, out, rows, s.T, s.NH, int(s.HS));
        LOOM_CUDA_CHECK_LAUNCH();
    }
    FlashArgs<T> a = make_args(q, k, v, ld, s, mask, drop);
    a.vec16 = a.vec16 && aligned16(dout);
    a.dout = dout;
    a.lse = lse;
    a.dsum = dsum;
    a.dq = dq;
    a.dk = dk;
    a.dv = dv;
    dispatch_head_size(s.HS, [&](auto hs) {
        constexpr int HS = decltype(hs)::value;
        const size_t kv_bytes = BackwardKvSmem<T, HS>(nullptr).bytes;
        const auto kv_kernel = &flash_backward_kv_kernel<T, HS>;
        prepare_smem(kv_kernel, kv_bytes, ctx);
        kv_kernel<<<grid_of(s), k_threads, kv_bytes, ctx.stream()>>>(a);
        LOOM_CUDA_CHECK_LAUNCH();
        const size_t q_bytes = BackwardQSmem<T, HS>(nullptr).bytes;
        const auto q_kernel = &flash_backward_q_kernel<T, HS>;
        prepare_smem(q_kernel, q_bytes, ctx);
        q_kernel<<<grid_of(s), k_threads, q_bytes, ctx.stream()>>>(a);
        LOOM_CUDA_CHECK_LAUNCH();
    });
}

}  // namespace

namespace cuda {

bool fused_attention_supported(const AttnShape& s) {
    return std::find(std::begin(k_head_sizes), std::end(k_head_sizes), s.HS) !=
           std::end(k_head_sizes);
}

void fused_attention_forward(const OpCtx& c, DType operands, void* y, float* lse, const void* q,
                             const void* k, const void* v, int64_t ld, const AttnShape& s,
                             const AttnMask& m, const DropoutSpec& d) {
    check_attention(c, operands, m, "fused_attention_forward");
    with_act(c, "fused_attention_forward", [&](auto t) {
        using T = decltype(t);
        flash_attention_forward_cuda<T>(P<T>(y), lse, P<T>(q), P<T>(k), P<T>(v), ld, s, m, d,
                                        context(c));
    });
}

void fused_attention_backward(const OpCtx& c, DType operands, void* dq, void* dk, void* dv,
                              const void* dy, const void* y, const float* lse, const void* q,
                              const void* k, const void* v, int64_t ld, const AttnShape& s,
                              const AttnMask& m, const DropoutSpec& d) {
    check_attention(c, operands, m, "fused_attention_backward");
    with_act(c, "fused_attention_backward", [&](auto t) {
        using T = decltype(t);
        flash_attention_backward_cuda<T>(P<T>(dq), P<T>(dk), P<T>(dv), P<T>(dy), P<T>(y), lse,
                                         P<T>(q), P<T>(k), P<T>(v), ld, s, m, d, context(c));
    });
}

}  // namespace cuda
}  // namespace loom
