// CUDA SGD (see sgd_cuda.h).
#include "ops/cuda/sgd_cuda.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"

namespace loom {
namespace {

constexpr int k_block = 256;

template <typename G, typename T>
__global__ void sgd_kernel(float* master, const G* grad, T* copy, int64_t n, float lr, float wd,
                           float grad_scale) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        // The CPU's p -= lr * (g + wd * p), each operation rounded on its own.
        const float g = __fmul_rn(gpu::to_f32(grad[i]), grad_scale);
        const float p = master[i];
        const float pn = __fsub_rn(p, __fmul_rn(lr, __fadd_rn(g, __fmul_rn(wd, p))));
        master[i] = pn;
        if (copy) copy[i] = gpu::from_f32<T>(pn);
    }
}

}  // namespace

template <typename G, typename T>
void sgd_update_cuda(float* master, const G* grad, T* copy, int64_t n, double lr,
                     double weight_decay, CudaContext& ctx, float grad_scale) {
    if (n <= 0) return;
    sgd_kernel<G, T><<<gpu::grid_for(n, k_block), k_block, 0, ctx.stream()>>>(
        master, grad, copy, n, float(lr), float(weight_decay), grad_scale);
    LOOM_CUDA_CHECK_LAUNCH();
}

#define LOOM_INSTANTIATE(G, T)                                                         \
    template void sgd_update_cuda<G, T>(float*, const G*, T*, int64_t, double, double, \
                                        CudaContext&, float);
LOOM_INSTANTIATE(float, float)
LOOM_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
LOOM_INSTANTIATE(float, __nv_bfloat16)
LOOM_INSTANTIATE(__half, __half)
LOOM_INSTANTIATE(float, __half)
#undef LOOM_INSTANTIATE

}  // namespace loom
