// CUDA embedding (see embedding_cuda.h).
#include "ops/cuda/embedding_cuda.h"

#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"

namespace loom {
namespace {

constexpr int k_block = 256;

__device__ void report_bad_id(DeviceErrorRecord* err, int64_t row, int64_t id, int64_t V) {
    if (atomicCAS(&err->code, k_device_ok, k_device_embedding_id_out_of_range) == k_device_ok) {
        err->a = row;
        err->b = id;
        err->c = V;
    }
}

// grid (N, column chunks): row n of out (+)= table[ids[n]].
template <typename T>
__global__ void embedding_forward_kernel(T* out, const int64_t* ids, const T* table, int64_t V,
                                         int64_t C, bool accumulate, DeviceErrorRecord* err) {
    const int64_t n = blockIdx.x;
    const int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int64_t id = ids[n];
    const bool bad = id < 0 || id >= V;
    if (bad && c == 0) report_bad_id(err, n, id, V);
    float x = bad ? 0.0f : gpu::to_f32(table[id * C + c]);
    if (accumulate) x += gpu::to_f32(out[n * C + c]);
    out[n * C + c] = gpu::from_f32<T>(x);
}

// keys[n] = ids[n] (or V for a bad id, sorted last and skipped); positions[n] = n.
// Unsigned keys: the sort then orders bits [0, end_bit) with no sign handling.
__global__ void embedding_keys_kernel(uint32_t* keys, int32_t* positions, const int64_t* ids,
                                      int64_t N, int64_t V, DeviceErrorRecord* err) {
    for (int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; n < N;
         n += int64_t(gridDim.x) * blockDim.x) {
        const int64_t id = ids[n];
        const bool bad = id < 0 || id >= V;
        if (bad) report_bad_id(err, n, id, V);
        keys[n] = uint32_t(bad ? V : id);
        positions[n] = int32_t(n);
    }
}

// grid (N, column chunks): block s handles the run of equal keys starting at sorted
// position s (blocks not at a run start exit), adding dout rows in position order.
template <typename T>
__global__ void embedding_backward_kernel(T* dtable, const uint32_t* keys, const int32_t* positions,
                                          const T* dout, int64_t N, int64_t V, int64_t C,
                                          int64_t padding_idx) {
    const int64_t s = blockIdx.x;
    const uint32_t key = keys[s];
    if (s > 0 && keys[s - 1] == key) return;
    if (int64_t(key) >= V || int64_t(key) == padding_idx) return;
    const int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = gpu::to_f32(dtable[int64_t(key) * C + c]);
    for (int64_t j = s; j < N && keys[j] == key; ++j)
        acc += gpu::to_f32(dout[int64_t(positions[j]) * C + c]);
    dtable[int64_t(key) * C + c] = gpu::from_f32<T>(acc);
}

int bits_for(int64_t max_value) {
    int bits = 1;
    while (bits < 31 && (int64_t(1) << bits) <= max_value) ++bits;
    return bits;
}

}  // namespace

template <typename T>
void embedding_forward_cuda(T* out, const int64_t* ids, const T* table, int64_t N, int64_t V,
                            int64_t C, bool accumulate, CudaContext& ctx) {
    if (N <= 0 || C <= 0) return;
    LOOM_CUDA_REQUIRE(N < (int64_t(1) << 31), "embedding_forward_cuda: N = " + std::to_string(N) +
                                                  " rows exceeds 2^31 - 1");
    dim3 grid(unsigned(N), unsigned(gpu::ceil_div(C, k_block)));
    embedding_forward_kernel<<<grid, k_block, 0, ctx.stream()>>>(out, ids, table, V, C, accumulate,
                                                                 ctx.device_errors());
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void embedding_backward_cuda(T* dtable, const int64_t* ids, const T* dout, int64_t N, int64_t V,
                             int64_t C, int64_t padding_idx, CudaContext& ctx) {
    if (N <= 0 || C <= 0) return;
    LOOM_CUDA_REQUIRE(N < (int64_t(1) << 31) && V < (int64_t(1) << 31) - 1,
                      "embedding_backward_cuda: N = " + std::to_string(N) +
                          ", V = " + std::to_string(V) + " exceed the 32-bit sort keys");
    const int end_bit = bits_for(V);  // keys are in [0, V]
    size_t temp_bytes = 0;
    LOOM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        nullptr, temp_bytes, (const uint32_t*)nullptr, (uint32_t*)nullptr, (const int32_t*)nullptr,
        (int32_t*)nullptr, int(N), 0, end_bit, ctx.stream()));
    ScratchCarver plan(nullptr);
    for (int i = 0; i < 4; ++i) plan.take<int32_t>(N);
    plan.take<char>(int64_t(temp_bytes));
    ScratchCarver carve(ctx.scratch(plan.used()));
    uint32_t* keys_in = carve.take<uint32_t>(N);
    uint32_t* keys = carve.take<uint32_t>(N);
    int32_t* pos_in = carve.take<int32_t>(N);
    int32_t* positions = carve.take<int32_t>(N);
    void* temp = carve.take<char>(int64_t(temp_bytes));

    embedding_keys_kernel<<<gpu::grid_for(N, k_block), k_block, 0, ctx.stream()>>>(
        keys_in, pos_in, ids, N, V, ctx.device_errors());
    LOOM_CUDA_CHECK_LAUNCH();
    // Radix sort is stable: equal ids keep increasing positions.
    LOOM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys, pos_in,
                                                    positions, int(N), 0, end_bit, ctx.stream()));
    dim3 grid(unsigned(N), unsigned(gpu::ceil_div(C, k_block)));
    embedding_backward_kernel<<<grid, k_block, 0, ctx.stream()>>>(dtable, keys, positions, dout, N,
                                                                  V, C, padding_idx);
    LOOM_CUDA_CHECK_LAUNCH();
}

#define LOOM_INSTANTIATE(T)                                                                  \
    template void embedding_forward_cuda<T>(T*, const int64_t*, const T*, int64_t, int64_t,  \
                                            int64_t, bool, CudaContext&);                    \
    template void embedding_backward_cuda<T>(T*, const int64_t*, const T*, int64_t, int64_t, \
                                             int64_t, int64_t, CudaContext&);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

}  // namespace loom
