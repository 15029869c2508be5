// CUDA element-wise entries: residual add, in-place add, bias add and scale,
// dtype conversion, and the sum of squares of the gradient norm.
//
// Same arguments and aliasing rules as ops/elementwise.h. Arithmetic is fp32
// with one rounding on store; conversion rounds to nearest even.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/entries_cuda.h"

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
__global__ void add_bias_kernel(T* y, const T* bias, int64_t n, int64_t OC) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        y[i] = gpu::from_f32<T>(gpu::to_f32(y[i]) + gpu::to_f32(bias[i % OC]));
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
constexpr int k_sq_blocks = 1024;

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

namespace cuda {

void residual_forward(const OpCtx& c, void* y, const void* a, const void* b, int64_t n) {
    if (n <= 0) return;
    with_act(c, "residual_forward", [&](auto t) {
        using T = decltype(t);
        residual_kernel<<<gpu::grid_for(n, k_block), k_block, 0, context(c).stream()>>>(
            P<T>(y), P<T>(a), P<T>(b), n);
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

void add_inplace(const OpCtx& c, void* y, const void* x, int64_t n) {
    residual_forward(c, y, y, x, n);
}

// y (N, OC) += bias (OC): also a row-parallel linear's replicated bias, added
// once after the all-reduce of the partial products.
void add_bias(const OpCtx& c, void* y, const void* b, int64_t N, int64_t OC) {
    if (N <= 0 || OC <= 0 || b == nullptr) return;
    const int64_t n = N * OC;
    with_act(c, "add_bias", [&](auto t) {
        using T = decltype(t);
        add_bias_kernel<<<gpu::grid_for(n, k_block), k_block, 0, context(c).stream()>>>(
            P<T>(y), P<T>(b), n, OC);
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

void scale(Backend& be, void* x, DType t, int64_t n, float s) {
    if (n <= 0) return;
    with_float_type(t, "scale", [&](auto t0) {
        using T = decltype(t0);
        scale_kernel<<<gpu::grid_for(n, k_block), k_block, 0, context(be).stream()>>>(P<T>(x), s,
                                                                                      n);
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

void convert(Backend& be, void* dst, DType dt, const void* src, DType st, int64_t n) {
    CudaContext& ctx = context(be);
    if (dt == st) {
        if (n > 0)
            LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * dtype_size(dt),
                                            cudaMemcpyDeviceToDevice, ctx.stream()));
        return;
    }
    if (n <= 0) return;
    with_float_type(dt, "convert", [&](auto d0) {
        with_float_type(st, "convert", [&](auto s0) {
            using D = decltype(d0);
            using S = decltype(s0);
            // One side is f32, as on the CPU.
            if constexpr (std::is_same_v<D, float> || std::is_same_v<S, float>)
                convert_kernel<<<gpu::grid_for(n, k_block), k_block, 0, ctx.stream()>>>(
                    P<D>(dst), P<S>(src), n);
            else
                cuda_bad_type(dt, "convert from a 16-bit type to another");
        });
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

void sum_squares(Backend& be, const void* x, DType t,
                 std::span<const std::pair<int64_t, int64_t>> ranges, double* parts) {
    if (ranges.empty()) return;
    CudaContext& ctx = context(be);
    // One scratch carving for the partial sums and every range's result: a
    // fresh allocation per call would be freed with cudaFree, which waits for
    // the whole device at every gradient norm.
    ScratchCarver plan(nullptr);
    plan.take<double>(k_sq_blocks);
    plan.take<double>(int64_t(ranges.size()));
    ScratchCarver carve(ctx.scratch(plan.used()));
    double* partial = carve.take<double>(k_sq_blocks);
    double* dev = carve.take<double>(int64_t(ranges.size()));
    with_float_type(t, "sum of squares", [&](auto t0) {
        using T = decltype(t0);
        // Stream order lets each range reuse the partial sums of the one before.
        for (size_t k = 0; k < ranges.size(); ++k) {
            sum_squares_partial_kernel<<<k_sq_blocks, k_block, 0, ctx.stream()>>>(
                P<T>(x) + ranges[k].first, ranges[k].second - ranges[k].first, partial);
            LOOM_CUDA_CHECK_LAUNCH();
            sum_partials_kernel<<<1, k_block, 0, ctx.stream()>>>(partial, k_sq_blocks, dev + k);
            LOOM_CUDA_CHECK_LAUNCH();
        }
    });
    LOOM_CUDA_CHECK(cudaMemcpyAsync(parts, dev, ranges.size() * sizeof(double),
                                    cudaMemcpyDeviceToHost, ctx.stream()));
    ctx.synchronize();
}

}  // namespace cuda
}  // namespace loom
