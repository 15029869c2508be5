// CUDA element-wise kernels (see elementwise_cuda.h).
#include "ops/cuda/elementwise_cuda.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"

namespace loom {
namespace {

constexpr int k_block = 256;

template <typename T>
__global__ void residual_kernel(T* out, const T* a, const T* b, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        out[i] = gpu::from_f32<T>(gpu::to_f32(a[i]) + gpu::to_f32(b[i]));
}

template <typename T>
__global__ void scale_kernel(T* y, float s, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        y[i] = gpu::from_f32<T>(gpu::to_f32(y[i]) * s);
}

template <typename Dst, typename Src>
__global__ void convert_kernel(Dst* dst, const Src* src, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        dst[i] = gpu::from_f32<Dst>(gpu::to_f32(src[i]));
}

}  // namespace

template <typename T>
void residual_forward_cuda(T* out, const T* a, const T* b, int64_t n, CudaContext& ctx) {
    if (n <= 0) return;
    residual_kernel<<<gpu::grid_for(n, k_block), k_block, 0, ctx.stream()>>>(out, a, b, n);
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void add_inplace_cuda(T* y, const T* x, int64_t n, CudaContext& ctx) {
    residual_forward_cuda<T>(y, y, x, n, ctx);
}

template <typename T>
void scale_inplace_cuda(T* y, float s, int64_t n, CudaContext& ctx) {
    if (n <= 0) return;
    scale_kernel<<<gpu::grid_for(n, k_block), k_block, 0, ctx.stream()>>>(y, s, n);
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename Dst, typename Src>
void convert_cuda(Dst* dst, const Src* src, int64_t n, CudaContext& ctx) {
    if (n <= 0) return;
    convert_kernel<<<gpu::grid_for(n, k_block), k_block, 0, ctx.stream()>>>(dst, src, n);
    LOOM_CUDA_CHECK_LAUNCH();
}

#define LOOM_INSTANTIATE(T)                                                                \
    template void residual_forward_cuda<T>(T*, const T*, const T*, int64_t, CudaContext&); \
    template void add_inplace_cuda<T>(T*, const T*, int64_t, CudaContext&);                \
    template void scale_inplace_cuda<T>(T*, float, int64_t, CudaContext&);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

#define LOOM_INSTANTIATE_CONVERT(D, S) \
    template void convert_cuda<D, S>(D*, const S*, int64_t, CudaContext&);
LOOM_INSTANTIATE_CONVERT(float, __nv_bfloat16)
LOOM_INSTANTIATE_CONVERT(__nv_bfloat16, float)
LOOM_INSTANTIATE_CONVERT(float, __half)
LOOM_INSTANTIATE_CONVERT(__half, float)
LOOM_INSTANTIATE_CONVERT(float, float)
#undef LOOM_INSTANTIATE_CONVERT

}  // namespace loom
