// CUDA AdamW (see adamw_cuda.h).
#include "ops/cuda/adamw_cuda.h"

#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"

namespace loom {
namespace {

constexpr int k_block = 256;

// Per-step constants, folded on the host in fp64 exactly as the formula in ops/adamw.h.
struct AdamWStep {
    float decay;      // 1 - lr * wd
    float beta1, beta2;
    float step_size;  // lr / (1 - beta1^t)
    float inv_bc2_sqrt;  // 1 / sqrt(1 - beta2^t)
    float eps;
};

AdamWStep adamw_step_constants(const AdamWParams& hp, int64_t step) {
    LOOM_CUDA_REQUIRE(step >= 1, "adamw_update_cuda: step counts from 1, got " +
                                     std::to_string(step));
    AdamWStep s;
    s.decay = float(1.0 - hp.lr * hp.weight_decay);
    s.beta1 = float(hp.beta1);
    s.beta2 = float(hp.beta2);
    s.step_size = float(hp.lr / (1.0 - std::pow(hp.beta1, double(step))));
    s.inv_bc2_sqrt = float(1.0 / std::sqrt(1.0 - std::pow(hp.beta2, double(step))));
    s.eps = float(hp.eps);
    return s;
}

template <typename G, typename T>
__global__ void adamw_kernel(float* param, const G* grad, float* m, float* v, T* copy, int64_t n,
                             AdamWStep s) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        const float g = gpu::to_f32(grad[i]);
        float p = param[i] * s.decay;
        const float mi = s.beta1 * m[i] + (1.0f - s.beta1) * g;
        const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * g * g;
        p -= s.step_size * mi / (sqrtf(vi) * s.inv_bc2_sqrt + s.eps);
        m[i] = mi;
        v[i] = vi;
        param[i] = p;
        if (copy) copy[i] = gpu::from_f32<T>(p);
    }
}

}  // namespace

void adamw_update_cuda(float* param, const float* grad, float* m, float* v, int64_t n,
                       const AdamWParams& hp, int64_t step, CudaContext& ctx) {
    if (n <= 0) return;
    AdamWStep s = adamw_step_constants(hp, step);
    adamw_kernel<float, float><<<gpu::grid_for(n, k_block), k_block, 0, ctx.stream()>>>(
        param, grad, m, v, nullptr, n, s);
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename G, typename T>
void adamw_update_mixed_cuda(float* master, const G* grad, float* m, float* v, T* param_copy,
                             int64_t n, const AdamWParams& hp, int64_t step, CudaContext& ctx) {
    if (n <= 0) return;
    AdamWStep s = adamw_step_constants(hp, step);
    adamw_kernel<G, T><<<gpu::grid_for(n, k_block), k_block, 0, ctx.stream()>>>(
        master, grad, m, v, param_copy, n, s);
    LOOM_CUDA_CHECK_LAUNCH();
}

#define LOOM_INSTANTIATE(G, T)                                                                  \
    template void adamw_update_mixed_cuda<G, T>(float*, const G*, float*, float*, T*, int64_t,  \
                                                const AdamWParams&, int64_t, CudaContext&);
LOOM_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
LOOM_INSTANTIATE(float, __nv_bfloat16)
LOOM_INSTANTIATE(__half, __half)
LOOM_INSTANTIATE(float, __half)
#undef LOOM_INSTANTIATE

}  // namespace loom
