// CUDA dropout (see dropout_cuda.h). Forward and backward are one kernel: the
// mask is recomputed from the Philox counter, never stored.
#include "ops/cuda/dropout_cuda.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/dropout_math.cuh"

namespace loom {
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

template <typename T>
void dropout_apply(T* out, const T* inp, int64_t B, int64_t per_sample, const DropoutSpec& d,
                   CudaContext& ctx) {
    const int64_t n = B * per_sample;
    if (n <= 0) return;
    if (!d.active()) {
        if (out != inp)
            LOOM_CUDA_CHECK(cudaMemcpyAsync(out, inp, size_t(n) * sizeof(T),
                                            cudaMemcpyDeviceToDevice, ctx.stream()));
        return;
    }
    dropout_kernel<<<gpu::grid_for(n, k_block), k_block, 0, ctx.stream()>>>(
        out, inp, n, per_sample, d, gpu::dropout_scale(d));
    LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void dropout_forward_cuda(T* out, const T* inp, int64_t B, int64_t per_sample, const DropoutSpec& d,
                          CudaContext& ctx) {
    dropout_apply(out, inp, B, per_sample, d, ctx);
}

template <typename T>
void dropout_backward_cuda(T* dinp, const T* dout, int64_t B, int64_t per_sample,
                           const DropoutSpec& d, CudaContext& ctx) {
    dropout_apply(dinp, dout, B, per_sample, d, ctx);
}

#define LOOM_INSTANTIATE(T)                                                                    \
    template void dropout_forward_cuda<T>(T*, const T*, int64_t, int64_t, const DropoutSpec&,  \
                                          CudaContext&);                                       \
    template void dropout_backward_cuda<T>(T*, const T*, int64_t, int64_t, const DropoutSpec&, \
                                           CudaContext&);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

}  // namespace loom
