// CUDA softmax cross-entropy (see softmax_xent_cuda.h).
//
// One block per row: max, then sum of exp(x - max), both fp32 block reductions
// with a fixed tree. loss = log(sum) + max - x[target]. Per-row losses go to an
// fp32 scratch row, then a single block sums them in fp64 in a fixed order.
#include "ops/cuda/softmax_xent_cuda.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/xent_sum.cuh"

namespace loom {
namespace {

constexpr int k_block = 512;

template <typename T>
__device__ void row_max_and_sum(const T* x, int64_t V, float* shared, float& mx, float& sum) {
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, gpu::to_f32(x[j]));
    mx = gpu::block_max(m, shared);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += expf(gpu::to_f32(x[j]) - mx);
    sum = gpu::block_sum(s, shared);
}

__device__ bool target_is_bad(int64_t t, int64_t V) {
    return t != k_ignore_index && (t < 0 || t >= V);
}

__device__ void report_bad_target(DeviceErrorRecord* err, int64_t row, int64_t t, int64_t V) {
    if (atomicCAS(&err->code, k_device_ok, k_device_xent_target_out_of_range) == k_device_ok) {
        err->a = row;
        err->b = t;
        err->c = V;
    }
}

template <typename T>
__global__ void xent_forward_kernel(float* row_loss, T* losses, const T* logits,
                                    const int64_t* targets, int64_t V, DeviceErrorRecord* err) {
    __shared__ float shared[gpu::k_warp];
    const int64_t row = blockIdx.x;
    const int64_t t = targets[row];
    const bool bad = target_is_bad(t, V);
    if (t == k_ignore_index || bad) {
        if (threadIdx.x == 0) {
            if (bad) report_bad_target(err, row, t, V);
            row_loss[row] = -1.0f;  // "not counted": a real loss is >= 0 (or NaN, which counts)
            if (losses) losses[row] = gpu::from_f32<T>(0.0f);
        }
        return;
    }
    const T* x = logits + row * V;
    float mx, sum;
    row_max_and_sum(x, V, shared, mx, sum);
    if (threadIdx.x == 0) {
        float loss = logf(sum) + mx - gpu::to_f32(x[t]);
        row_loss[row] = loss;
        if (losses) losses[row] = gpu::from_f32<T>(loss);
    }
}

// result = (sum of counted rows in fp64, number of counted rows). One block.
__global__ void xent_sum_kernel(XentSum* result, const float* row_loss, int64_t N) {
    double acc = 0.0;
    long long cnt = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
        float l = row_loss[i];
        if (!(l < 0.0f)) {
            acc += double(l);
            ++cnt;
        }
    }
    xent_block_sum(result, acc, cnt);
}

template <typename T>
__global__ void xent_backward_kernel(T* dlogits, const T* logits, const int64_t* targets, int64_t V,
                                     float scale) {
    __shared__ float shared[gpu::k_warp];
    const int64_t row = blockIdx.x;
    const int64_t t = targets[row];
    T* dx = dlogits + row * V;
    if (t == k_ignore_index || target_is_bad(t, V)) {
        for (int64_t j = threadIdx.x; j < V; j += blockDim.x) dx[j] = gpu::from_f32<T>(0.0f);
        return;
    }
    const T* x = logits + row * V;
    float mx, sum;
    row_max_and_sum(x, V, shared, mx, sum);
    const float inv = 1.0f / sum;
    // NOTE: when dlogits aliases logits each element is read before it is
    // written by the same thread, and the reductions above are complete.
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
        float p = expf(gpu::to_f32(x[j]) - mx) * inv;
        dx[j] = gpu::from_f32<T>(scale * (p - (j == t ? 1.0f : 0.0f)));
    }
}

}  // namespace

// row_loss: (N) fp32 scratch; result: one device XentSum.
template <typename T>
static void xent_forward_launch(T* losses, const T* logits, const int64_t* targets, int64_t N,
                                int64_t V, float* row_loss, XentSum* result, CudaContext& ctx) {
    LOOM_CUDA_REQUIRE(V > 0,
                      "softmax_xent_forward_cuda: V must be positive, got " + std::to_string(V));
    if (N <= 0) {
        LOOM_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(XentSum), ctx.stream()));
        return;
    }
    xent_forward_kernel<<<unsigned(N), k_block, 0, ctx.stream()>>>(row_loss, losses, logits,
                                                                   targets, V, ctx.device_errors());
    LOOM_CUDA_CHECK_LAUNCH();
    xent_sum_kernel<<<1, k_xent_sum_block, 0, ctx.stream()>>>(result, row_loss, N);
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
XentSum softmax_xent_forward_cuda(T* losses, const T* logits, const int64_t* targets, int64_t N,
                                  int64_t V, CudaContext& ctx) {
    ScratchCarver plan(nullptr);
    plan.take<float>(N > 0 ? N : 1);
    plan.take<XentSum>(1);
    ScratchCarver carve(ctx.scratch(plan.used()));
    float* row_loss = carve.take<float>(N > 0 ? N : 1);
    XentSum* d_result = carve.take<XentSum>(1);
    xent_forward_launch<T>(losses, logits, targets, N, V, row_loss, d_result, ctx);
    XentSum out{};
    LOOM_CUDA_CHECK(
        cudaMemcpyAsync(&out, d_result, sizeof out, cudaMemcpyDeviceToHost, ctx.stream()));
    ctx.check_device_errors();  // synchronises
    return out;
}

template <typename T>
void softmax_xent_backward_cuda(T* dlogits, const T* logits, const int64_t* targets, int64_t N,
                                int64_t V, double scale, CudaContext& ctx) {
    LOOM_CUDA_REQUIRE(V > 0,
                      "softmax_xent_backward_cuda: V must be positive, got " + std::to_string(V));
    if (N <= 0) return;
    xent_backward_kernel<<<unsigned(N), k_block, 0, ctx.stream()>>>(dlogits, logits, targets, V,
                                                                    float(scale));
    LOOM_CUDA_CHECK_LAUNCH();
}

#define LOOM_INSTANTIATE(T)                                                                       \
    template XentSum softmax_xent_forward_cuda<T>(T*, const T*, const int64_t*, int64_t, int64_t, \
                                                  CudaContext&);                                  \
    template void softmax_xent_backward_cuda<T>(T*, const T*, const int64_t*, int64_t, int64_t,   \
                                                double, CudaContext&);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

}  // namespace loom
