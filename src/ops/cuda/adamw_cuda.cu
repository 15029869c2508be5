// CUDA AdamW (see adamw_cuda.h).
#include "ops/cuda/adamw_cuda.h"

#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"

namespace loom {
namespace {

constexpr int k_block = 256;

// Per-step constants, formed in fp64 and rounded to float once, exactly as the
// CPU's adamw_update (torch applying Python scalars to a float tensor).
struct AdamWStep {
    float decay;  // 1 - lr * wd
    float beta1, one_minus_beta1;
    float beta2, one_minus_beta2;
    float step_size;  // lr / (1 - beta1^t)
    float bc2_sqrt;   // sqrt(1 - beta2^t)
    float eps;
};

AdamWStep adamw_step_constants(const AdamWParams& hp, int64_t step) {
    LOOM_CUDA_REQUIRE(step >= 1,
                      "adamw_update_cuda: step counts from 1, got " + std::to_string(step));
    AdamWStep s;
    s.decay = float(1.0 - hp.lr * hp.weight_decay);
    s.beta1 = float(hp.beta1);
    s.one_minus_beta1 = float(1.0 - hp.beta1);
    s.beta2 = float(hp.beta2);
    s.one_minus_beta2 = float(1.0 - hp.beta2);
    s.step_size = float(hp.lr / (1.0 - std::pow(hp.beta1, double(step))));
    s.bc2_sqrt = float(std::sqrt(1.0 - std::pow(hp.beta2, double(step))));
    s.eps = float(hp.eps);
    return s;
}

template <typename G, typename T>
__global__ void adamw_kernel(float* param, const G* grad, float* m, float* v, T* copy, int64_t n,
                             AdamWStep s, float grad_scale) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        // torch 1.13's rounding sequence, as the CPU's adamw_update: the two moment
        // updates are FMAs onto the decayed moment, every other operation rounds on
        // its own (the _rn intrinsics stop nvcc contracting them into FMAs), and
        // sqrt and division are IEEE-rounded, so fp32 results can match the CPU
        // bit for bit.
        // Clipping and loss-scale removal in fp32, one rounding as the CPU's
        // scale_grads (x 1 is exact, so unscaled steps keep their bits).
        const float g = __fmul_rn(gpu::to_f32(grad[i]), grad_scale);
        const float p = __fmul_rn(param[i], s.decay);
        const float mi = fmaf(g, s.one_minus_beta1, __fmul_rn(m[i], s.beta1));
        const float vi = fmaf(__fmul_rn(s.one_minus_beta2, g), g, __fmul_rn(v[i], s.beta2));
        const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
        const float pn = __fadd_rn(p, __fdiv_rn(__fmul_rn(-s.step_size, mi), denom));
        m[i] = mi;
        v[i] = vi;
        param[i] = pn;
        if (copy) copy[i] = gpu::from_f32<T>(pn);
    }
}

}  // namespace

void adamw_update_cuda(float* param, const float* grad, float* m, float* v, int64_t n,
                       const AdamWParams& hp, int64_t step, CudaContext& ctx, float grad_scale) {
    if (n <= 0) return;
    AdamWStep s = adamw_step_constants(hp, step);
    adamw_kernel<float, float>
        <<<gpu::grid_for(n, k_block), k_block, 0, ctx.stream()>>>(param, grad, m, v, nullptr, n, s,
                                                                     grad_scale);
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename G, typename T>
void adamw_update_mixed_cuda(float* master, const G* grad, float* m, float* v, T* param_copy,
                             int64_t n, const AdamWParams& hp, int64_t step, CudaContext& ctx,
                             float grad_scale) {
    if (n <= 0) return;
    AdamWStep s = adamw_step_constants(hp, step);
    adamw_kernel<G, T><<<gpu::grid_for(n, k_block), k_block, 0, ctx.stream()>>>(master, grad, m, v,
                                                                                param_copy, n, s, grad_scale);
    LOOM_CUDA_CHECK_LAUNCH();
}

#define LOOM_INSTANTIATE(G, T)                                                                 \
    template void adamw_update_mixed_cuda<G, T>(float*, const G*, float*, float*, T*, int64_t, \
                                                const AdamWParams&, int64_t, CudaContext&, float);
LOOM_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
LOOM_INSTANTIATE(float, __nv_bfloat16)
LOOM_INSTANTIATE(__half, __half)
LOOM_INSTANTIATE(float, __half)
#undef LOOM_INSTANTIATE

}  // namespace loom
