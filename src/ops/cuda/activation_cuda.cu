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

#define LOOM_INSTANTIATE(T)                                                                    \
    template void activation_forward_cuda<T>(T*, const T*, int64_t, Activation, CudaContext&); \
    template void activation_backward_cuda<T>(T*, const T*, const T*, int64_t, Activation,     \
                                              CudaContext&);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

}  // namespace loom
