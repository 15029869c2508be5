// CUDA SGD over flat runs (optim/sgd.h: torch.optim.SGD, momentum 0, coupled
// weight decay): p = p - lr * (g * grad_scale + wd * p), in fp32 on the master
// weights with the CPU's rounding sequence, the bf16/f16 copy refreshed in the
// same pass. Stateless and elementwise, so a ZeRO shard updates alone.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/entries_cuda.h"

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

void cuda::sgd(Backend& be, const UpdateBuffers& b, std::span<const UpdateRun> runs, double lr,
               double weight_decay, float grad_scale) {
    CudaContext& ctx = cuda::context(be);
    cuda::with_update_types(b, [&](auto g0, auto t0) {
        using G = decltype(g0);
        using T = decltype(t0);
        T* copy = static_cast<T*>(b.copy);
        for (const UpdateRun& r : runs) {
            if (r.n <= 0) continue;
            sgd_kernel<G, T><<<gpu::grid_for(r.n, k_block), k_block, 0, ctx.stream()>>>(
                b.master + r.param_offset, static_cast<const G*>(b.grad) + r.state_offset,
                copy ? copy + r.param_offset : nullptr, r.n, float(lr),
                float(r.decay ? weight_decay : 0.0), grad_scale);
            LOOM_CUDA_CHECK_LAUNCH();
        }
    });
}

}  // namespace loom
