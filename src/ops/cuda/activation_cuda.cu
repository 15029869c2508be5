// CUDA activations and fused bias + activation (see activation_cuda.h).
#include "ops/cuda/activation_cuda.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/activation_math.cuh"
#include "ops/cuda/column_sum.cuh"

namespace loom {
namespace {

constexpr int k_block = 256;

#define LOOM_GRID_STRIDE(i, n)                                                \
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); \
         i += int64_t(gridDim.x) * blockDim.x)

template <typename T>
__global__ void act_forward_kernel(T* out, const T* inp, int64_t n, Activation a) {
    LOOM_GRID_STRIDE(i, n) out[i] = gpu::from_f32<T>(gpu::act_value(gpu::to_f32(inp[i]), a));
}

template <typename T>
__global__ void act_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n, Activation a) {
    LOOM_GRID_STRIDE(i, n) {
        float g = gpu::to_f32(dout[i]) * gpu::act_grad(gpu::to_f32(inp[i]), a);
        dinp[i] = gpu::from_f32<T>(g);
    }
}

template <typename T>
__global__ void bias_act_forward_kernel(T* out, T* pre, const T* inp, const T* bias, int64_t N,
                                        int64_t OC, Activation a) {
    LOOM_GRID_STRIDE(i, N * OC) {
        // Round the pre-activation to T first: backward sees exactly the stored value.
        T p = gpu::from_f32<T>(gpu::to_f32(inp[i]) + gpu::to_f32(bias[i % OC]));
        if (pre) pre[i] = p;
        out[i] = gpu::from_f32<T>(gpu::act_value(gpu::to_f32(p), a));
    }
}

#undef LOOM_GRID_STRIDE

}  // namespace

template <typename T>
void activation_forward_cuda(T* out, const T* inp, int64_t n, Activation a, CudaContext& ctx) {
    if (n <= 0) return;
    act_forward_kernel<<<gpu::grid_for(n, k_block), k_block, 0, ctx.stream()>>>(out, inp, n, a);
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void activation_backward_cuda(T* dinp, const T* inp, const T* dout, int64_t n, Activation a,
                              CudaContext& ctx) {
    if (n <= 0) return;
    act_backward_kernel<<<gpu::grid_for(n, k_block), k_block, 0, ctx.stream()>>>(dinp, inp, dout, n,
                                                                                 a);
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void bias_activation_forward_cuda(T* out, T* pre, const T* inp, const T* bias, int64_t N,
                                  int64_t OC, Activation a, CudaContext& ctx) {
    if (N * OC <= 0) return;
    bias_act_forward_kernel<<<gpu::grid_for(N * OC, k_block), k_block, 0, ctx.stream()>>>(
        out, pre, inp, bias, N, OC, a);
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void bias_activation_backward_cuda(T* dpre, T* dbias, const T* pre, const T* dout, int64_t N,
                                   int64_t OC, Activation a, CudaContext& ctx) {
    activation_backward_cuda<T>(dpre, pre, dout, N * OC, a, ctx);
    if (dbias) gpu::column_sum_accumulate(dbias, dpre, N, OC, ctx.stream());
}

#define LOOM_INSTANTIATE(T)                                                                      \
    template void activation_forward_cuda<T>(T*, const T*, int64_t, Activation, CudaContext&);   \
    template void activation_backward_cuda<T>(T*, const T*, const T*, int64_t, Activation,       \
                                              CudaContext&);                                     \
    template void bias_activation_forward_cuda<T>(T*, T*, const T*, const T*, int64_t, int64_t,  \
                                                  Activation, CudaContext&);                     \
    template void bias_activation_backward_cuda<T>(T*, T*, const T*, const T*, int64_t, int64_t, \
                                                   Activation, CudaContext&);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

}  // namespace loom
