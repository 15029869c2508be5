// CUDA linear layer (see matmul_cuda.h): three GEMMs and a column reduction.
#include "ops/cuda/matmul_cuda.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/activation_cuda.h"
#include "ops/cuda/column_sum.cuh"
#include "ops/cuda/gemm_cuda.h"

namespace loom {
namespace {

constexpr int k_block = 256;

// out (N, OC) += bias broadcast over rows (the fallback when the epilogue is unavailable).
template <typename T>
__global__ void add_bias_kernel(T* out, const T* bias, int64_t N, int64_t OC) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < N * OC;
         i += int64_t(gridDim.x) * blockDim.x)
        out[i] = gpu::from_f32<T>(gpu::to_f32(out[i]) + gpu::to_f32(bias[i % OC]));
}

// ld of the weight as stored, and whether the forward GEMM transposes it.
struct WeightView {
    int64_t ld;
    bool trans_fwd;
};
WeightView weight_view(WeightLayout layout, int64_t C, int64_t OC) {
    return layout == WeightLayout::out_in ? WeightView{C, true} : WeightView{OC, false};
}

}  // namespace

template <typename T>
void matmul_forward_cuda(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C,
                         int64_t OC, WeightLayout layout, CudaContext& ctx) {
    if (N <= 0 || OC <= 0) return;
    const WeightView w = weight_view(layout, C, OC);
    if (bias && gemm_bias_epilogue_cuda<T>(false, w.trans_fwd, N, OC, C, inp, C, weight, w.ld, out,
                                           OC, bias, ctx))
        return;
    gemm_cuda<T>(false, w.trans_fwd, N, OC, C, 1.0f, inp, C, weight, w.ld, 0.0f, out, OC, ctx);
    if (bias) {
        add_bias_kernel<<<gpu::grid_for(N * OC, k_block), k_block, 0, ctx.stream()>>>(out, bias, N,
                                                                                      OC);
        LOOM_CUDA_CHECK_LAUNCH();
    }
}

template <typename T>
void matmul_backward_cuda(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                          const T* weight, int64_t N, int64_t C, int64_t OC, WeightLayout layout,
                          bool accumulate_dinp, CudaContext& ctx) {
    if (N <= 0) return;
    const WeightView w = weight_view(layout, C, OC);
    if (dinp) {
        // dinp (N, C) = dout (N, OC) @ W' where W' is (OC, C): W as stored for out_in.
        gemm_cuda<T>(false, !w.trans_fwd, N, C, OC, 1.0f, dout, OC, weight, w.ld,
                     accumulate_dinp ? 1.0f : 0.0f, dinp, C, ctx);
    }
    if (dweight) {
        if (layout == WeightLayout::out_in) {
            // dW (OC, C) += dout^T (OC, N) @ inp (N, C)
            gemm_cuda<T>(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C, ctx);
        } else {
            // dW (C, OC) += inp^T (C, N) @ dout (N, OC)
            gemm_cuda<T>(true, false, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dweight, OC, ctx);
        }
    }
    if (dbias) gpu::column_sum_accumulate(dbias, dout, N, OC, ctx.stream());
}

#define LOOM_INSTANTIATE(T)                                                                  \
    template void matmul_forward_cuda<T>(T*, const T*, const T*, const T*, int64_t, int64_t, \
                                         int64_t, WeightLayout, CudaContext&);               \
    template void matmul_backward_cuda<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, \
                                          int64_t, int64_t, WeightLayout, bool, CudaContext&);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

}  // namespace loom
