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

// Partial sums per block over a grid-stride range; the grid size is a constant,
// so which elements meet in which partial never depends on the device.
constexpr int k_sq_blocks = int(k_sum_squares_partials);

template <typename T>
__global__ void sum_squares_partial_kernel(const T* x, int64_t n, double* partial) {
    __shared__ double shared[k_block];
    double acc = 0.0;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        const double v = double(gpu::to_f32(x[i]));
        acc += v * v;
    }
    shared[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (int(threadIdx.x) < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = shared[0];
}

__global__ void sum_partials_kernel(const double* partial, int n, double* result) {
    __shared__ double shared[k_block];
    double acc = 0.0;
    for (int i = int(threadIdx.x); i < n; i += blockDim.x) acc += partial[i];
    shared[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (int(threadIdx.x) < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) *result = shared[0];
}

}  // namespace

template <typename T>
void sum_squares_cuda(const T* x, int64_t n, double* result, CudaContext& ctx) {
    ScratchCarver plan(nullptr);
    plan.take<double>(k_sq_blocks);
    ScratchCarver carve(ctx.scratch(plan.used()));
    sum_squares_cuda(x, n, result, carve.take<double>(k_sq_blocks), ctx);
}

template <typename T>
void sum_squares_cuda(const T* x, int64_t n, double* result, double* partial, CudaContext& ctx) {
    sum_squares_partial_kernel<<<k_sq_blocks, k_block, 0, ctx.stream()>>>(x, n, partial);
    LOOM_CUDA_CHECK_LAUNCH();
    sum_partials_kernel<<<1, k_block, 0, ctx.stream()>>>(partial, k_sq_blocks, result);
    LOOM_CUDA_CHECK_LAUNCH();
}

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
    template void scale_inplace_cuda<T>(T*, float, int64_t, CudaContext&);                 \
    template void sum_squares_cuda<T>(const T*, int64_t, double*, CudaContext&);           \
    template void sum_squares_cuda<T>(const T*, int64_t, double*, double*, CudaContext&);
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
