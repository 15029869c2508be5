// CUDA dropout keyed by global element (semantics of ops/dropout.h).
//
// The kernel calls the very PhiloxStream::uniform the CPU uses (core/philox.h is
// host/device), so for the same DropoutSpec the GPU keeps exactly the CPU's
// elements: a mask never depends on the device, the thread or the rank.
// Forward and backward are one kernel: the mask is recomputed from the Philox
// counter, never stored. The output may alias the input.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/dropout_math.cuh"
#include "ops/cuda/entries_cuda.h"

namespace loom::cuda {
namespace {

constexpr int k_block = 256;

template <typename T>
__global__ void dropout_kernel(T* out, const T* inp, int64_t n, int64_t per_sample, DropoutSpec d,
                               float scale) {
    // Element i of this batch is element (sample_offset + i / per_sample) * per_sample
    // + i % per_sample = sample_offset * per_sample + i of the global stream.
    const uint64_t base = uint64_t(d.sample_offset) * uint64_t(per_sample);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        const bool keep = gpu::dropout_keep(d, base + uint64_t(i));
        out[i] = gpu::from_f32<T>(keep ? gpu::to_f32(inp[i]) * scale : 0.0f);
    }
}

void dropout_apply(const OpCtx& c, void* out, const void* inp, int64_t B, int64_t per_sample,
                   const DropoutSpec& d, const char* op) {
    const int64_t n = B * per_sample;
    if (n <= 0) return;
    CudaContext& ctx = context(c);
    if (!d.active()) {
        if (out != inp)
            LOOM_CUDA_CHECK(cudaMemcpyAsync(out, inp, size_t(n) * dtype_size(c.act),
                                            cudaMemcpyDeviceToDevice, ctx.stream()));
        return;
    }
    with_act(c, op, [&](auto t) {
        using T = decltype(t);
        dropout_kernel<<<gpu::grid_for(n, k_block), k_block, 0, ctx.stream()>>>(
            P<T>(out), P<T>(inp), n, per_sample, d, gpu::dropout_scale(d));
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void dropout_forward(const OpCtx& c, void* y, const void* x, int64_t B, int64_t per_sample,
                     const DropoutSpec& d) {
    dropout_apply(c, y, x, B, per_sample, d, "dropout_forward");
}

void dropout_backward(const OpCtx& c, void* dx, const void* dy, int64_t B, int64_t per_sample,
                      const DropoutSpec& d) {
    dropout_apply(c, dx, dy, B, per_sample, d, "dropout_backward");
}

}  // namespace loom::cuda
