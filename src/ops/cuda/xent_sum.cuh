// The block-wide end of a cross-entropy loss sum: every thread brings its
// partial (loss sum, labelled count); warps, then the block's warps in index
// order, add them up into one XentSum. Fixed order, no atomics: the same sum
// on every run. One block of k_xent_sum_block threads.
#pragma once

#include "backend/cuda/cuda_device.cuh"
#include "ops/softmax_xent.h"

namespace loom {

constexpr int k_xent_sum_block = 1024;

__device__ inline void xent_block_sum(XentSum* result, double acc, long long cnt) {
    __shared__ double s_sum[k_xent_sum_block / gpu::k_warp];
    __shared__ long long s_cnt[k_xent_sum_block / gpu::k_warp];
    for (int off = gpu::k_warp / 2; off > 0; off /= 2) {
        acc += __shfl_xor_sync(0xffffffffu, acc, off);
        cnt += __shfl_xor_sync(0xffffffffu, cnt, off);
    }
    const int lane = threadIdx.x % gpu::k_warp, warp = threadIdx.x / gpu::k_warp;
    if (lane == 0) {
        s_sum[warp] = acc;
        s_cnt[warp] = cnt;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        long long count = 0;
        for (int w = 0; w < int(blockDim.x) / gpu::k_warp; ++w) {
            total += s_sum[w];
            count += s_cnt[w];
        }
        result->loss_sum = total;
        result->count = count;
    }
}

}  // namespace loom
