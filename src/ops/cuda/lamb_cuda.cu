// CUDA LAMB over tiles of the flat buffers: ops/lamb.h's contract, per-step
// constants and rounding (optim/lamb.h's formula; tiles from ops/lamb_tiles.h).
//
// Three launches, all deterministic (fixed-shape trees and fixed-order sums,
// no atomics):
//   lamb_moments        per tile: m, v updated in place; the tile's sums of
//                       p^2 and u^2 in fp64 (u = mh / (sqrt(vh) + eps) + wd*p);
//                       then per row the sum of its tiles' partials, in tile
//                       order, into row_sums (rows, 2).
//   (ZeRO: the caller all-reduces row_sums over dp here, so every rank sees
//    each tensor's whole norms although it holds only some of its elements.)
//   lamb_apply          per tile: trust ratio r = ||p|| / ||u|| of its row
//                       (1 when either is 0 or the row does not adapt),
//                       p -= float(lr * r) * u, with u recomputed from the new
//                       moments and the old p exactly as the first pass did;
//                       the bf16/f16 parameter copy refreshed in the same pass.
// tiles (n_tiles) and row_begin (rows + 1) are in device memory (LambTiles as
// planned); tile_sums (n_tiles, 2) is scratch; row_sums (rows, 2) receives
// sum p^2 and sum u^2 per row (0 for rows without tiles).
// The gradient is read as G (float, or the compute type) times grad_scale in
// fp32 (clipping, loss-scale removal: one rounding, as the CPU's scale_grads).
// The gradient and moment buffers are indexed by LambTile::state, the master
// weights and the copy by LambTile::param, so a ZeRO shard's state buffers
// need not mirror the flat layout.
#include <cmath>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/entries_cuda.h"

namespace loom {
namespace {

constexpr int k_block = 256;

// u for one element, the CPU's expression
//   (m * inv_bc1) / (sqrt(v) * inv_sqrt_bc2 + eps) + wd * p
// with every operation rounded on its own (the _rn intrinsics keep nvcc from
// contracting them into FMAs) and IEEE sqrt and division.
__device__ __forceinline__ float lamb_u(float m, float v, float p, float wd, const LambStep& s) {
    const float num = __fmul_rn(m, s.inv_bc1);
    const float den = __fadd_rn(__fmul_rn(__fsqrt_rn(v), s.inv_sqrt_bc2), s.eps);
    return __fadd_rn(__fdiv_rn(num, den), __fmul_rn(wd, p));
}

// Sum of a double over the block (blockDim.x == k_block): a fixed tree in
// shared memory; thread 0 gets the result.
__device__ __forceinline__ double block_tree_sum(double x, double* sh) {
    sh[threadIdx.x] = x;
    __syncthreads();
    for (int half = k_block / 2; half > 0; half /= 2) {
        if (int(threadIdx.x) < half) sh[threadIdx.x] += sh[threadIdx.x + half];
        __syncthreads();
    }
    return sh[0];
}

template <typename G>
__global__ void lamb_moments_kernel(const float* master, const G* grad, float* m, float* v,
                                    const LambTile* tiles, LambStep s, float grad_scale,
                                    double* tile_sums) {
    __shared__ double sh[k_block];
    const LambTile t = tiles[blockIdx.x];
    const float wd = t.adapt ? s.weight_decay : 0.0f;
    const float* p = master + t.param;
    const G* g = grad + t.state;
    float* mt = m + t.state;
    float* vt = v + t.state;
    double p_sq = 0, u_sq = 0;
    for (int i = threadIdx.x; i < t.n; i += k_block) {
        // b1*m + (1-b1)*g and b2*v + ((1-b2)*g)*g, as the CPU evaluates them.
        const float gi = __fmul_rn(gpu::to_f32(g[i]), grad_scale);
        const float mi = __fadd_rn(__fmul_rn(s.beta1, mt[i]), __fmul_rn(s.one_minus_beta1, gi));
        const float vi =
            __fadd_rn(__fmul_rn(s.beta2, vt[i]), __fmul_rn(__fmul_rn(s.one_minus_beta2, gi), gi));
        mt[i] = mi;
        vt[i] = vi;
        const float pi = p[i];
        const double u = lamb_u(mi, vi, pi, wd, s);
        p_sq += double(pi) * double(pi);
        u_sq += u * u;
    }
    p_sq = block_tree_sum(p_sq, sh);
    __syncthreads();  // everyone has read sh[0]
    u_sq = block_tree_sum(u_sq, sh);
    if (threadIdx.x == 0) {
        tile_sums[2 * int64_t(blockIdx.x)] = p_sq;
        tile_sums[2 * int64_t(blockIdx.x) + 1] = u_sq;
    }
}

// One thread per row: its tiles' partial sums in tile order.
__global__ void lamb_row_sums_kernel(const double* tile_sums, const int64_t* row_begin,
                                     int32_t rows, double* row_sums) {
    const int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (r >= rows) return;
    double p = 0, u = 0;
    for (int64_t t = row_begin[r]; t < row_begin[r + 1]; ++t) {
        p += tile_sums[2 * t];
        u += tile_sums[2 * t + 1];
    }
    row_sums[2 * r] = p;
    row_sums[2 * r + 1] = u;
}

template <typename T>
__global__ void lamb_apply_kernel(float* master, T* copy, const float* m, const float* v,
                                  const LambTile* tiles, const double* row_sums, LambStep s,
                                  double lr) {
    const LambTile t = tiles[blockIdx.x];
    const float wd = t.adapt ? s.weight_decay : 0.0f;
    // The CPU's trust ratio, in double from the row's whole sums.
    const double pn = sqrt(row_sums[2 * int64_t(t.row)]);
    const double un = sqrt(row_sums[2 * int64_t(t.row) + 1]);
    const double ratio = t.adapt && pn > 0 && un > 0 ? pn / un : 1.0;
    const float scale = float(lr * ratio);
    float* p = master + t.param;
    const float* mt = m + t.state;
    const float* vt = v + t.state;
    T* c = copy ? copy + t.param : nullptr;
    for (int i = threadIdx.x; i < t.n; i += k_block) {
        const float pi = p[i];
        const float pn_i = __fsub_rn(pi, __fmul_rn(scale, lamb_u(mt[i], vt[i], pi, wd, s)));
        p[i] = pn_i;
        if (c) c[i] = gpu::from_f32<T>(pn_i);
    }
}

}  // namespace

void cuda::lamb_moments(Backend& be, const UpdateBuffers& b, const LambPlanView& p,
                        const LambStep& s, float grad_scale) {
    LOOM_CUDA_REQUIRE(p.n_tiles < (int64_t(1) << 31), "lamb: too many tiles");
    CudaContext& ctx = cuda::context(be);
    cuda::with_update_types(b, [&](auto g0, auto) {
        using G = decltype(g0);
        if (p.n_tiles <= 0) return;
        lamb_moments_kernel<G><<<unsigned(p.n_tiles), k_block, 0, ctx.stream()>>>(
            b.master, static_cast<const G*>(b.grad), b.m, b.v, p.tiles, s, grad_scale, p.tile_sums);
        LOOM_CUDA_CHECK_LAUNCH();
    });
    if (p.rows > 0) {
        lamb_row_sums_kernel<<<gpu::grid_for(p.rows, k_block), k_block, 0, ctx.stream()>>>(
            p.tile_sums, p.row_begin, p.rows, p.row_sums);
        LOOM_CUDA_CHECK_LAUNCH();
    }
}

// The copy (indexed like the master), or none for fp32.
void cuda::lamb_apply(Backend& be, const UpdateBuffers& b, const LambPlanView& p, const LambStep& s,
                      double lr) {
    LOOM_CUDA_REQUIRE(p.n_tiles < (int64_t(1) << 31), "lamb: too many tiles");
    if (p.n_tiles <= 0) return;
    CudaContext& ctx = cuda::context(be);
    cuda::with_update_types(b, [&](auto, auto t0) {
        using T = decltype(t0);
        lamb_apply_kernel<T><<<unsigned(p.n_tiles), k_block, 0, ctx.stream()>>>(
            b.master, static_cast<T*>(b.copy), b.m, b.v, p.tiles, p.row_sums, s, lr);
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace loom
