// CUDA AdamW over flat buffers (torch.optim.AdamW semantics, as ops/adamw.h).
//
// The bias corrections are computed once on the host in fp64; the kernel works
// in fp32 on fp32 master weights and moments. With a bf16/f16 compute copy it
// reads a bf16/f16 (or fp32) gradient and refreshes the copy the forward uses
// in the same pass (llm.c's adamw_kernel3 with master weights). grad_scale
// multiplies each gradient in fp32 before the update (clipping, removing a
// loss scale) without a pass over the gradient buffer. Works on any
// contiguous shard, so ZeRO calls it on its slice.
#include <cmath>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/entries_cuda.h"

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
    LOOM_CUDA_REQUIRE(step >= 1, "adamw: step counts from 1, got " + std::to_string(step));
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

void cuda::adamw(Backend& be, const UpdateBuffers& b, std::span<const UpdateRun> runs,
                 const AdamWParams& hp, int64_t step, float grad_scale) {
    CudaContext& ctx = cuda::context(be);
    cuda::with_update_types(b, [&](auto g0, auto t0) {
        using G = decltype(g0);
        using T = decltype(t0);
        // An fp32 update has no copy to refresh: the master is what forward reads.
        T* copy = std::is_same_v<T, float> ? nullptr : static_cast<T*>(b.copy);
        for (const UpdateRun& r : runs) {
            if (r.n <= 0) continue;
            AdamWParams h = hp;
            if (!r.decay) h.weight_decay = 0.0;
            const AdamWStep s = adamw_step_constants(h, step);
            adamw_kernel<G, T><<<gpu::grid_for(r.n, k_block), k_block, 0, ctx.stream()>>>(
                b.master + r.param_offset, static_cast<const G*>(b.grad) + r.state_offset,
                b.m + r.state_offset, b.v + r.state_offset, copy ? copy + r.param_offset : nullptr,
                r.n, s, grad_scale);
            LOOM_CUDA_CHECK_LAUNCH();
        }
    });
}

}  // namespace loom
