// Deterministic column sums: dbias (OC) += sum over rows of d (N, OC).
//
// One block owns 32 columns; its 32x32 threads walk the rows in a fixed
// interleave and combine their partial sums in a fixed order, so the result
// depends only on N and OC, never on scheduling (no atomics). Used for every
// bias gradient (matmul, activation+bias) and, with a per-element transform,
// for the layer-norm weight and bias gradients.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"

namespace loom::gpu {

constexpr int k_colsum_rows = 32;  // threads per column strip (blockDim.y)

// dbias[c] += sum_r d[r * OC + c]
template <typename T, typename D>
__global__ void column_sum_accumulate_kernel(T* dbias, const D* d, int64_t N, int64_t OC) {
    __shared__ float partial[k_colsum_rows][k_warp + 1];
    const int64_t c = int64_t(blockIdx.x) * k_warp + threadIdx.x;
    float acc = 0.0f;
    if (c < OC)
        for (int64_t r = threadIdx.y; r < N; r += k_colsum_rows) acc += to_f32(d[r * OC + c]);
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < OC) {
        float total = 0.0f;
        for (int i = 0; i < k_colsum_rows; ++i) total += partial[i][threadIdx.x];
        dbias[c] = from_f32<T>(to_f32(dbias[c]) + total);
    }
}

template <typename T, typename D>
void column_sum_accumulate(T* dbias, const D* d, int64_t N, int64_t OC, cudaStream_t stream) {
    if (OC <= 0) return;
    dim3 block(k_warp, k_colsum_rows);
    column_sum_accumulate_kernel<<<unsigned(ceil_div(OC, k_warp)), block, 0, stream>>>(dbias, d, N,
                                                                                       OC);
    LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace loom::gpu
