// CUDA layer norm, fused forward and backward (torch semantics, as ops/layer_norm.h).
//
// Differences from the CPU, on purpose: mean and rstd are always fp32 (bf16
// statistics would cost accuracy for no memory worth saving), and `eps` is
// applied in fp32. dw and db accumulate (+=) through a deterministic column
// reduction; dx overwrites unless `accumulate_dx` (the residual stream).
//
// Forward and the input gradient run one warp per row (llm.c's layernorm
// kernels): the row is read from global memory, statistics reduce with warp
// shuffles. Statistics use two passes (mean, then centred variance) rather
// than E[x^2] - E[x]^2, which loses digits when |mean| >> std. The weight and
// bias gradients are a second, column-strip kernel (column_sum.cuh's layout)
// so they need neither atomics nor scratch.
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/column_sum.cuh"
#include "ops/cuda/entries_cuda.h"

namespace loom::cuda {
namespace {

constexpr int k_rows_per_block = 8;  // warps per block, one row each

template <typename T>
__global__ void layer_norm_forward_kernel(T* out, float* mean, float* rstd, const T* inp,
                                          const T* weight, const T* bias, int64_t N, int C,
                                          float eps) {
    const int lane = threadIdx.x % gpu::k_warp;
    const int64_t row = int64_t(blockIdx.x) * k_rows_per_block + threadIdx.x / gpu::k_warp;
    if (row >= N) return;
    const T* x = inp + row * C;
    float sum = 0.0f;
    for (int i = lane; i < C; i += gpu::k_warp) sum += gpu::to_f32(x[i]);
    const float m = gpu::warp_sum(sum) / float(C);
    float sq = 0.0f;
    for (int i = lane; i < C; i += gpu::k_warp) {
        float d = gpu::to_f32(x[i]) - m;
        sq += d * d;
    }
    const float s = 1.0f / sqrtf(gpu::warp_sum(sq) / float(C) + eps);  // IEEE, as the CPU
    T* o = out + row * C;
    for (int i = lane; i < C; i += gpu::k_warp) {
        float y = (gpu::to_f32(x[i]) - m) * s * gpu::to_f32(weight[i]);
        if (bias) y += gpu::to_f32(bias[i]);
        o[i] = gpu::from_f32<T>(y);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

template <typename T>
__global__ void layer_norm_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                       const float* mean, const float* rstd, int64_t N, int C,
                                       bool accumulate) {
    const int lane = threadIdx.x % gpu::k_warp;
    const int64_t row = int64_t(blockIdx.x) * k_rows_per_block + threadIdx.x / gpu::k_warp;
    if (row >= N) return;
    const T* x = inp + row * C;
    const T* dy = dout + row * C;
    const float m = mean[row], s = rstd[row];
    // dxhat = dy * w;  dx = s * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
    float sum_d = 0.0f, sum_dx = 0.0f;
    for (int i = lane; i < C; i += gpu::k_warp) {
        float xhat = (gpu::to_f32(x[i]) - m) * s;
        float d = gpu::to_f32(dy[i]) * gpu::to_f32(weight[i]);
        sum_d += d;
        sum_dx += d * xhat;
    }
    const float mean_d = gpu::warp_sum(sum_d) / float(C);
    const float mean_dx = gpu::warp_sum(sum_dx) / float(C);
    T* dx = dinp + row * C;
    for (int i = lane; i < C; i += gpu::k_warp) {
        float xhat = (gpu::to_f32(x[i]) - m) * s;
        float d = gpu::to_f32(dy[i]) * gpu::to_f32(weight[i]);
        float g = s * (d - mean_d - xhat * mean_dx);
        if (accumulate) g += gpu::to_f32(dx[i]);
        dx[i] = gpu::from_f32<T>(g);
    }
}

// dweight[c] += sum_r dout[r, c] * xhat[r, c];  dbias[c] += sum_r dout[r, c]
template <typename T>
__global__ void layer_norm_dparams_kernel(T* dweight, T* dbias, const T* dout, const T* inp,
                                          const float* mean, const float* rstd, int64_t N,
                                          int64_t C) {
    __shared__ float part_w[gpu::k_colsum_rows][gpu::k_warp + 1];
    __shared__ float part_b[gpu::k_colsum_rows][gpu::k_warp + 1];
    const int64_t c = int64_t(blockIdx.x) * gpu::k_warp + threadIdx.x;
    float acc_w = 0.0f, acc_b = 0.0f;
    if (c < C) {
        for (int64_t r = threadIdx.y; r < N; r += gpu::k_colsum_rows) {
            float dy = gpu::to_f32(dout[r * C + c]);
            float xhat = (gpu::to_f32(inp[r * C + c]) - mean[r]) * rstd[r];
            acc_w += dy * xhat;
            acc_b += dy;
        }
    }
    part_w[threadIdx.y][threadIdx.x] = acc_w;
    part_b[threadIdx.y][threadIdx.x] = acc_b;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int i = 0; i < gpu::k_colsum_rows; ++i) {
            tw += part_w[i][threadIdx.x];
            tb += part_b[i][threadIdx.x];
        }
        dweight[c] = gpu::from_f32<T>(gpu::to_f32(dweight[c]) + tw);
        if (dbias) dbias[c] = gpu::from_f32<T>(gpu::to_f32(dbias[c]) + tb);
    }
}

void require_width(int64_t C, const char* op) {
    LOOM_CUDA_REQUIRE(C > 0 && C < (int64_t(1) << 31),
                      std::string(op) + ": C must be in [1, 2^31), got " + std::to_string(C));
}

}  // namespace

void layer_norm_forward(const OpCtx& c, void* y, float* mean, float* rstd, const void* x,
                        const void* w, const void* b, int64_t N, int64_t C, double eps) {
    require_width(C, "layer_norm_forward");
    if (N <= 0) return;
    unsigned grid = unsigned(gpu::ceil_div(N, k_rows_per_block));
    with_act(c, "layer_norm_forward", [&](auto t) {
        using T = decltype(t);
        layer_norm_forward_kernel<<<grid, k_rows_per_block * gpu::k_warp, 0, context(c).stream()>>>(
            P<T>(y), mean, rstd, P<T>(x), P<T>(w), P<T>(b), N, int(C), float(eps));
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

void layer_norm_backward(const OpCtx& c, void* dx, void* dw, void* db, const void* dy,
                         const void* x, const void* w, const float* mean, const float* rstd,
                         int64_t N, int64_t C, bool accumulate_dx) {
    // A frozen LayerNorm (LoRA's base) skips the parameter kernel, which sums
    // both gradients together: a frozen weight with a trained bias it cannot do.
    LOOM_CUDA_REQUIRE(dw != nullptr || db == nullptr,
                      "a LayerNorm on CUDA with a frozen weight and a trained bias");
    require_width(C, "layer_norm_backward");
    if (N <= 0) return;
    CudaContext& ctx = context(c);
    unsigned grid = unsigned(gpu::ceil_div(N, k_rows_per_block));
    with_act(c, "layer_norm_backward", [&](auto t) {
        using T = decltype(t);
        layer_norm_dinp_kernel<<<grid, k_rows_per_block * gpu::k_warp, 0, ctx.stream()>>>(
            P<T>(dx), P<T>(dy), P<T>(x), P<T>(w), mean, rstd, N, int(C), accumulate_dx);
        LOOM_CUDA_CHECK_LAUNCH();
        if (dw) {
            dim3 block(gpu::k_warp, gpu::k_colsum_rows);
            layer_norm_dparams_kernel<<<unsigned(gpu::ceil_div(C, gpu::k_warp)), block, 0,
                                        ctx.stream()>>>(P<T>(dw), P<T>(db), P<T>(dy), P<T>(x), mean,
                                                        rstd, N, C);
            LOOM_CUDA_CHECK_LAUNCH();
        }
    });
}

}  // namespace loom::cuda
