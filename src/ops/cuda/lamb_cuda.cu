// CUDA LAMB (see lamb_cuda.h).
#include "ops/cuda/lamb_cuda.h"

#include <cmath>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"

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

template <typename G>
void lamb_moments_cuda(const float* master, const G* grad, float* m, float* v,
                       const LambTile* tiles, int64_t n_tiles, const int64_t* row_begin,
                       int32_t rows, double* tile_sums, double* row_sums, const LambStep& s,
                       CudaContext& ctx, float grad_scale) {
    LOOM_CUDA_REQUIRE(n_tiles < (int64_t(1) << 31), "lamb: too many tiles");
    if (n_tiles > 0) {
        lamb_moments_kernel<G><<<unsigned(n_tiles), k_block, 0, ctx.stream()>>>(
            master, grad, m, v, tiles, s, grad_scale, tile_sums);
        LOOM_CUDA_CHECK_LAUNCH();
    }
    if (rows > 0) {
        lamb_row_sums_kernel<<<gpu::grid_for(rows, k_block), k_block, 0, ctx.stream()>>>(
            tile_sums, row_begin, rows, row_sums);
        LOOM_CUDA_CHECK_LAUNCH();
    }
}

template <typename T>
void lamb_apply_cuda(float* master, T* copy, const float* m, const float* v, const LambTile* tiles,
                     int64_t n_tiles, const double* row_sums, const LambStep& s, double lr,
                     CudaContext& ctx) {
    LOOM_CUDA_REQUIRE(n_tiles < (int64_t(1) << 31), "lamb: too many tiles");
    if (n_tiles <= 0) return;
    lamb_apply_kernel<T><<<unsigned(n_tiles), k_block, 0, ctx.stream()>>>(master, copy, m, v, tiles,
                                                                          row_sums, s, lr);
    LOOM_CUDA_CHECK_LAUNCH();
}

#define LOOM_INSTANTIATE(G)                                                                     \
    template void lamb_moments_cuda<G>(const float*, const G*, float*, float*, const LambTile*, \
                                       int64_t, const int64_t*, int32_t, double*, double*,      \
                                       const LambStep&, CudaContext&, float);                   \
    template void lamb_apply_cuda<G>(float*, G*, const float*, const float*, const LambTile*,   \
                                     int64_t, const double*, const LambStep&, double,           \
                                     CudaContext&);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

}  // namespace loom
