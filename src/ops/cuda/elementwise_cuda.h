// CUDA element-wise kernels: residual add, in-place add and scale, dtype conversion.
//
// Same arguments and aliasing rules as ops/elementwise.h, then the CudaContext.
// T is float, __nv_bfloat16 or __half; arithmetic is fp32 with one rounding on store.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_context.h"

namespace loom {

// out = a + b (out may alias a or b).
template <typename T>
void residual_forward_cuda(T* out, const T* a, const T* b, int64_t n, CudaContext& ctx);

// y += x
template <typename T>
void add_inplace_cuda(T* y, const T* x, int64_t n, CudaContext& ctx);

// y *= s
template <typename T>
void scale_inplace_cuda(T* y, float s, int64_t n, CudaContext& ctx);

// *result = sum of x[i]^2 in fp64 (device memory), for the gradient norm. Fixed
// grid and a fixed-order final pass: the same bits run to run (no atomics).
template <typename T>
void sum_squares_cuda(const T* x, int64_t n, double* result, CudaContext& ctx);
// Doubles of device memory the partial sums of one call take.
inline constexpr int64_t k_sum_squares_partials = 1024;
// The same with the partial sums in `partial` (k_sum_squares_partials
// doubles), for a caller that carves the context's scratch itself.
template <typename T>
void sum_squares_cuda(const T* x, int64_t n, double* result, double* partial, CudaContext& ctx);

// dst = src converted (round to nearest even), for Dst, Src in {float, bf16, f16}.
template <typename Dst, typename Src>
void convert_cuda(Dst* dst, const Src* src, int64_t n, CudaContext& ctx);

}  // namespace loom
