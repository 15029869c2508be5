// CUDA embedding lookup and its deterministic backward (semantics of
// ops/embedding.h), whole and vocab-parallel (ops/vocab_parallel.h).
//
// Backward sorts the (id, position) pairs with a stable radix sort, then one
// block per distinct id adds that id's dout rows into dtable in position order:
// the same order as the CPU's sequential loop, with no atomics, so the result
// is bit-identical run to run (and equal to the CPU in fp32 up to the ops'
// fp32 rounding). Ids outside [0, V) are reported through the context's error
// record (the row gets zeros in forward, no gradient in backward); padding_idx
// rows get no gradient.
//
// Vocab-parallel: rank r owns ids [first, first + count) (comm/tp_vocab.h).
// Its lookup writes the owned rows and zeros elsewhere, the summand of
// Megatron "g" (the caller all-reduces on tp); its backward maps the ids it
// does not own (and padding_idx) to an extra row `count` that the backward
// above skips as padding.
#include <cub/device/device_radix_sort.cuh>

#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/entries_cuda.h"

namespace loom::cuda {
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

// grid (N, column chunks).
template <typename T>
__global__ void vocab_lookup_kernel(T* out, const int64_t* ids, const T* table_local, int64_t V,
                                    int64_t C, int64_t first, int64_t count,
                                    DeviceErrorRecord* err) {
    const int64_t n = blockIdx.x;
    const int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int64_t id = ids[n];
    if ((id < 0 || id >= V) && c == 0) report_bad_id(err, n, id, V);
    const int64_t local = id - first;
    const bool mine = id >= 0 && id < V && local >= 0 && local < count;
    out[n * C + c] = mine ? table_local[local * C + c] : gpu::from_f32<T>(0.0f);
}

__global__ void vocab_backward_ids_kernel(int64_t* local, const int64_t* ids, int64_t N,
                                          int64_t first, int64_t count, int64_t padding_idx) {
    for (int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; n < N;
         n += int64_t(gridDim.x) * blockDim.x) {
        const int64_t id = ids[n], l = id - first;
        local[n] = (id != padding_idx && l >= 0 && l < count) ? l : count;
    }
}

void require_rows(int64_t N, const char* op) {
    LOOM_CUDA_REQUIRE(N < (int64_t(1) << 31),
                      std::string(op) + ": N = " + std::to_string(N) + " rows exceeds 2^31 - 1");
}

int bits_for(int64_t max_value) {
    int bits = 1;
    while (bits < 31 && (int64_t(1) << bits) <= max_value) ++bits;
    return bits;
}

}  // namespace

void embedding_forward(const OpCtx& c, void* y, const int64_t* ids, const void* table, int64_t N,
                       int64_t V, int64_t C, bool accumulate) {
    if (N <= 0 || C <= 0) return;
    require_rows(N, "embedding_forward");
    CudaContext& ctx = context(c);
    dim3 grid(unsigned(N), unsigned(gpu::ceil_div(C, k_block)));
    with_act(c, "embedding_forward", [&](auto t) {
        using T = decltype(t);
        embedding_forward_kernel<<<grid, k_block, 0, ctx.stream()>>>(
            P<T>(y), ids, P<T>(table), V, C, accumulate, ctx.device_errors());
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

void embedding_backward(const OpCtx& c, void* dtable, const int64_t* ids, const void* dy, int64_t N,
                        int64_t V, int64_t C, int64_t padding_idx) {
    if (N <= 0 || C <= 0) return;
    LOOM_CUDA_REQUIRE(N < (int64_t(1) << 31) && V < (int64_t(1) << 31) - 1,
                      "embedding_backward: N = " + std::to_string(N) +
                          ", V = " + std::to_string(V) + " exceed the 32-bit sort keys");
    CudaContext& ctx = context(c);
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
    with_act(c, "embedding_backward", [&](auto t) {
        using T = decltype(t);
        embedding_backward_kernel<<<grid, k_block, 0, ctx.stream()>>>(
            P<T>(dtable), keys, positions, P<T>(dy), N, V, C, padding_idx);
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

void vocab_embedding_forward(const OpCtx& c, void* y, const int64_t* ids, const void* table,
                             int64_t N, int64_t V, int64_t C, int64_t first, int64_t count) {
    if (N <= 0 || C <= 0) return;
    require_rows(N, "vocab_embedding_forward");
    CudaContext& ctx = context(c);
    dim3 grid(unsigned(N), unsigned(gpu::ceil_div(C, k_block)));
    with_act(c, "vocab_embedding_forward", [&](auto t) {
        using T = decltype(t);
        vocab_lookup_kernel<<<grid, k_block, 0, ctx.stream()>>>(P<T>(y), ids, P<T>(table), V, C,
                                                                first, count, ctx.device_errors());
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

void vocab_embedding_backward(const OpCtx& c, void* dtable, const int64_t* ids, const void* dy,
                              int64_t N, int64_t, int64_t C, int64_t first, int64_t count,
                              int64_t padding_idx, int64_t* ids_work) {
    if (N <= 0) return;
    LOOM_CUDA_REQUIRE(ids_work != nullptr, "vocab_embedding_backward on CUDA without ids_work");
    vocab_backward_ids_kernel<<<gpu::grid_for(N, k_block), k_block, 0, context(c).stream()>>>(
        ids_work, ids, N, first, count, padding_idx);
    LOOM_CUDA_CHECK_LAUNCH();
    embedding_backward(c, dtable, ids_work, dy, N, count + 1, C, count);
}

}  // namespace loom::cuda
