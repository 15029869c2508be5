// Device-side helpers shared by the CUDA kernels: element types, conversions and
// deterministic reductions.
//
// Kernels are templated on the storage type T (float, __nv_bfloat16, __half)
// and always compute in fp32. Reductions are fixed-shape shuffle/shared-memory
// trees: for a given launch configuration the summation order is fixed, so
// results are bit-identical run to run (no atomics in any reduction).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <library_types.h>

#include <cstdint>

namespace loom::gpu {

constexpr int k_warp = 32;

template <typename T>
struct TypeInfo;
template <>
struct TypeInfo<float> {
    static constexpr cudaDataType_t data_type = CUDA_R_32F;
    static constexpr const char* name = "f32";
};
template <>
struct TypeInfo<__nv_bfloat16> {
    static constexpr cudaDataType_t data_type = CUDA_R_16BF;
    static constexpr const char* name = "bf16";
};
template <>
struct TypeInfo<__half> {
    static constexpr cudaDataType_t data_type = CUDA_R_16F;
    static constexpr const char* name = "f16";
};

__device__ __forceinline__ float to_f32(float x) {
    return x;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) {
    return __bfloat162float(x);
}
__device__ __forceinline__ float to_f32(__half x) {
    return __half2float(x);
}

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
    return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);  // round to nearest even, as the CPU's f32_to_bf16
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
    return __float2half_rn(x);
}

inline int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = k_warp / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int off = k_warp / 2; off > 0; off /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// Sum over a 1-D block (blockDim.x a multiple of 32, <= 1024); every thread gets
// the result. `shared` holds 32 floats. Safe to call repeatedly in a row.
__device__ __forceinline__ float block_sum(float v, float* shared) {
    const int lane = threadIdx.x % k_warp, warp = threadIdx.x / k_warp;
    const int n_warps = blockDim.x / k_warp;
    v = warp_sum(v);
    __syncthreads();  // previous use of `shared` is finished
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < n_warps ? shared[lane] : 0.0f;
    return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* shared) {
    const int lane = threadIdx.x % k_warp, warp = threadIdx.x / k_warp;
    const int n_warps = blockDim.x / k_warp;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < n_warps ? shared[lane] : -INFINITY;
    return warp_max(v);
}

// Grid-stride loop bounds for element-wise kernels.
inline unsigned grid_for(int64_t n, int block, int max_blocks = 65535 * 8) {
    int64_t g = ceil_div(n, block);
    if (g < 1) g = 1;
    return unsigned(g < max_blocks ? g : max_blocks);
}

}  // namespace loom::gpu
