// CUDA tensor-parallel pieces (see tp_vocab_cuda.h).
//
// Row kernels use one block per row with the fixed-tree block reductions of
// cuda_device.cuh, so every rank computes its partial statistics the same way
// run to run; the loss sum is one block adding rows in a fixed order in fp64.
#include "ops/cuda/tp_vocab_cuda.h"

#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/xent_sum.cuh"

namespace loom {
namespace {

constexpr int k_block = 256;
constexpr int k_row_block = 512;

__device__ bool target_is_bad(int64_t t, int64_t V) {
    return t != k_ignore_index && (t < 0 || t >= V);
}

__device__ void report(DeviceErrorRecord* err, int code, int64_t a, int64_t b, int64_t c) {
    if (atomicCAS(&err->code, k_device_ok, code) == k_device_ok) {
        err->a = a;
        err->b = b;
        err->c = c;
    }
}

// grid (N, column chunks).
template <typename T>
__global__ void lookup_kernel(T* out, const int64_t* ids, const T* table_local, int64_t V,
                              int64_t C, int64_t first, int64_t count, DeviceErrorRecord* err) {
    const int64_t n = blockIdx.x;
    const int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int64_t id = ids[n];
    if ((id < 0 || id >= V) && c == 0) report(err, k_device_embedding_id_out_of_range, n, id, V);
    const int64_t local = id - first;
    const bool mine = id >= 0 && id < V && local >= 0 && local < count;
    out[n * C + c] = mine ? table_local[local * C + c] : gpu::from_f32<T>(0.0f);
}

__global__ void backward_ids_kernel(int64_t* local, const int64_t* ids, int64_t N, int64_t first,
                                    int64_t count, int64_t padding_idx) {
    for (int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; n < N;
         n += int64_t(gridDim.x) * blockDim.x) {
        const int64_t id = ids[n], l = id - first;
        local[n] = (id != padding_idx && l >= 0 && l < count) ? l : count;
    }
}

template <typename T>
__global__ void add_bias_kernel(T* y, const T* bias, int64_t n, int64_t OC) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        y[i] = gpu::from_f32<T>(gpu::to_f32(y[i]) + gpu::to_f32(bias[i % OC]));
}

template <typename T>
__global__ void local_max_kernel(float* row_max, const T* logits, int64_t Vl, int64_t valid) {
    __shared__ float shared[gpu::k_warp];
    const T* x = logits + int64_t(blockIdx.x) * Vl;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) m = fmaxf(m, gpu::to_f32(x[j]));
    m = gpu::block_max(m, shared);
    if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

template <typename T>
__global__ void local_stats_kernel(float* stats, const T* logits, const int64_t* targets,
                                   const float* row_max, int64_t N, int64_t Vl, int64_t valid,
                                   int64_t first, int64_t V, DeviceErrorRecord* err) {
    __shared__ float shared[gpu::k_warp];
    const int64_t row = blockIdx.x;
    const T* x = logits + row * Vl;
    const float m = row_max[row];
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) s += expf(gpu::to_f32(x[j]) - m);
    s = gpu::block_sum(s, shared);
    if (threadIdx.x != 0) return;
    stats[row] = s;
    const int64_t t = targets[row];
    if (target_is_bad(t, V)) report(err, k_device_xent_target_out_of_range, row, t, V);
    const int64_t local = t - first;
    const bool owner = t != k_ignore_index && !target_is_bad(t, V) && local >= 0 && local < valid;
    stats[N + row] = owner ? gpu::to_f32(x[local]) : 0.0f;
}

// One block: rows in a fixed order per thread, then warps, then thread 0.
__global__ void loss_sum_kernel(XentSum* result, const float* row_max, const float* stats,
                                const int64_t* targets, int64_t N, int64_t V) {
    double acc = 0.0;
    long long cnt = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
        const int64_t t = targets[i];
        if (t == k_ignore_index || target_is_bad(t, V)) continue;
        // The CPU's order: (max + log(sum)) - target logit, in fp32.
        const float loss = (row_max[i] + logf(stats[i])) - stats[N + i];
        acc += double(loss);
        ++cnt;
    }
    xent_block_sum(result, acc, cnt);
}

template <typename T>
__global__ void xent_backward_kernel(T* dlogits, const T* logits, const int64_t* targets,
                                     const float* row_max, const float* stats, int64_t Vl,
                                     int64_t valid, int64_t first, int64_t V, float scale) {
    const int64_t row = blockIdx.x;
    const int64_t t = targets[row];
    T* d = dlogits + row * Vl;
    if (t == k_ignore_index || target_is_bad(t, V)) {
        for (int64_t j = threadIdx.x; j < Vl; j += blockDim.x) d[j] = gpu::from_f32<T>(0.0f);
        return;
    }
    const T* x = logits + row * Vl;
    const float m = row_max[row], inv = 1.0f / stats[row];
    const int64_t local = t - first;
    // NOTE: in place, each element is read before the same thread writes it.
    for (int64_t j = threadIdx.x; j < Vl; j += blockDim.x) {
        float g = 0.0f;
        if (j < valid) g = scale * (expf(gpu::to_f32(x[j]) - m) * inv - (j == local ? 1.0f : 0.0f));
        d[j] = gpu::from_f32<T>(g);
    }
}

void require_rows(int64_t N, const char* who) {
    LOOM_CUDA_REQUIRE(N < (int64_t(1) << 31),
                      std::string(who) + ": N = " + std::to_string(N) + " rows exceeds 2^31 - 1");
}

}  // namespace

template <typename T>
void vocab_parallel_lookup_cuda(T* out, const int64_t* ids, const T* table_local, int64_t N,
                                int64_t V, int64_t C, int64_t first, int64_t count,
                                CudaContext& ctx) {
    if (N <= 0 || C <= 0) return;
    require_rows(N, "vocab_parallel_lookup_cuda");
    dim3 grid(unsigned(N), unsigned(gpu::ceil_div(C, k_block)));
    lookup_kernel<<<grid, k_block, 0, ctx.stream()>>>(out, ids, table_local, V, C, first, count,
                                                      ctx.device_errors());
    LOOM_CUDA_CHECK_LAUNCH();
}

void vocab_parallel_backward_ids_cuda(int64_t* local, const int64_t* ids, int64_t N, int64_t first,
                                      int64_t count, int64_t padding_idx, CudaContext& ctx) {
    if (N <= 0) return;
    backward_ids_kernel<<<gpu::grid_for(N, k_block), k_block, 0, ctx.stream()>>>(
        local, ids, N, first, count, padding_idx);
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void add_bias_cuda(T* y, const T* bias, int64_t N, int64_t OC, CudaContext& ctx) {
    if (N <= 0 || OC <= 0 || bias == nullptr) return;
    const int64_t n = N * OC;
    add_bias_kernel<<<gpu::grid_for(n, k_block), k_block, 0, ctx.stream()>>>(y, bias, n, OC);
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void vocab_xent_local_max_cuda(float* row_max, const T* logits_local, int64_t N, int64_t Vl,
                               int64_t valid, CudaContext& ctx) {
    if (N <= 0) return;
    require_rows(N, "vocab_xent_local_max_cuda");
    local_max_kernel<<<unsigned(N), k_row_block, 0, ctx.stream()>>>(row_max, logits_local, Vl,
                                                                    valid);
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void vocab_xent_local_stats_cuda(float* stats, const T* logits_local, const int64_t* targets,
                                 const float* row_max, int64_t N, int64_t Vl, int64_t valid,
                                 int64_t first, int64_t V, CudaContext& ctx) {
    if (N <= 0) return;
    require_rows(N, "vocab_xent_local_stats_cuda");
    local_stats_kernel<<<unsigned(N), k_row_block, 0, ctx.stream()>>>(
        stats, logits_local, targets, row_max, N, Vl, valid, first, V, ctx.device_errors());
    LOOM_CUDA_CHECK_LAUNCH();
}

void vocab_xent_loss_sum_cuda(XentSum* result, const float* row_max, const float* stats,
                              const int64_t* targets, int64_t N, int64_t V, CudaContext& ctx) {
    if (N <= 0) {
        LOOM_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(XentSum), ctx.stream()));
        return;
    }
    loss_sum_kernel<<<1, k_xent_sum_block, 0, ctx.stream()>>>(result, row_max, stats, targets, N,
                                                              V);
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void vocab_xent_backward_cuda(T* dlogits_local, const T* logits_local, const int64_t* targets,
                              const float* row_max, const float* stats, int64_t N, int64_t Vl,
                              int64_t valid, int64_t first, int64_t V, double scale,
                              CudaContext& ctx) {
    if (N <= 0) return;
    require_rows(N, "vocab_xent_backward_cuda");
    xent_backward_kernel<<<unsigned(N), k_row_block, 0, ctx.stream()>>>(
        dlogits_local, logits_local, targets, row_max, stats, Vl, valid, first, V, float(scale));
    LOOM_CUDA_CHECK_LAUNCH();
}

#define LOOM_INSTANTIATE(T)                                                                      \
    template void vocab_parallel_lookup_cuda<T>(T*, const int64_t*, const T*, int64_t, int64_t,  \
                                                int64_t, int64_t, int64_t, CudaContext&);        \
    template void add_bias_cuda<T>(T*, const T*, int64_t, int64_t, CudaContext&);                \
    template void vocab_xent_local_max_cuda<T>(float*, const T*, int64_t, int64_t, int64_t,      \
                                               CudaContext&);                                    \
    template void vocab_xent_local_stats_cuda<T>(float*, const T*, const int64_t*, const float*, \
                                                 int64_t, int64_t, int64_t, int64_t, int64_t,    \
                                                 CudaContext&);                                  \
    template void vocab_xent_backward_cuda<T>(T*, const T*, const int64_t*, const float*,        \
                                              const float*, int64_t, int64_t, int64_t, int64_t,  \
                                              int64_t, double, CudaContext&);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

}  // namespace loom
