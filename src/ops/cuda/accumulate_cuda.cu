// acc += x in fp32 (see accumulate_cuda.h).
#include "ops/cuda/accumulate_cuda.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"

namespace loom {
namespace {

constexpr int k_block = 256;

template <typename T>
__global__ void accumulate_f32_kernel(float* acc, const T* x, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        acc[i] = __fadd_rn(acc[i], gpu::to_f32(x[i]));
}

}  // namespace

template <typename T>
void accumulate_f32_cuda(float* acc, const T* x, int64_t n, CudaContext& ctx) {
    if (n <= 0) return;
    accumulate_f32_kernel<T><<<gpu::grid_for(n, k_block), k_block, 0, ctx.stream()>>>(acc, x, n);
    LOOM_CUDA_CHECK_LAUNCH();
}

template void accumulate_f32_cuda<float>(float*, const float*, int64_t, CudaContext&);
template void accumulate_f32_cuda<__nv_bfloat16>(float*, const __nv_bfloat16*, int64_t,
                                                 CudaContext&);
template void accumulate_f32_cuda<__half>(float*, const __half*, int64_t, CudaContext&);

}  // namespace loom
