// CUDA activations: gelu (erf), gelu_new (tanh), relu, tanh.
//
// Same arguments as ops/activation.h; dx overwrites and may alias dy.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/activation_math.cuh"
#include "ops/cuda/entries_cuda.h"

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

namespace cuda {

void activation_forward(const OpCtx& c, void* y, DType y_type, const void* x, int64_t n,
                        Activation a) {
    check_act_type(c, y_type, "activation_forward");
    if (n <= 0) return;
    with_act(c, "activation_forward", [&](auto t) {
        using T = decltype(t);
        act_forward_kernel<<<gpu::grid_for(n, k_block), k_block, 0, context(c).stream()>>>(
            P<T>(y), P<T>(x), n, a);
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

void activation_backward(const OpCtx& c, void* dx, const void* x, const void* dy, int64_t n,
                         Activation a) {
    if (n <= 0) return;
    with_act(c, "activation_backward", [&](auto t) {
        using T = decltype(t);
        act_backward_kernel<<<gpu::grid_for(n, k_block), k_block, 0, context(c).stream()>>>(
            P<T>(dx), P<T>(x), P<T>(dy), n, a);
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace loom
