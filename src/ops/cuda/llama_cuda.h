// CUDA kernels of the Llama family's table entries, the same math and
// argument order as the CPU ops (ops/rms_norm.h, rope.h, repeat_kv.h,
// swiglu.h), then the CudaContext. Activations in T (f32, bf16, f16),
// computed in f32; rstd is f32. RMSNorm's dweight accumulates through a
// deterministic column reduction (column_sum.cuh's layout); repeat_kv's group
// sums run in head order. Not here: the sliding window (attention's).
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "ops/rope.h"

namespace loom {

template <typename T>
void rms_norm_forward_cuda(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C,
                           double eps, CudaContext& ctx);
// dweight may be null (a frozen weight).
template <typename T>
void rms_norm_backward_cuda(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                            const float* rstd, int64_t N, int64_t C, bool accumulate_dinp,
                            CudaContext& ctx);

template <typename T>
// positions: (B, T) device memory, or null for 0 .. T-1 (ops/rope.h).
void rope_cuda(T* x, int64_t ld, int64_t B, int64_t T_, int64_t heads, int64_t d,
               const RopeSpec& spec, bool inverse, CudaContext& ctx,
               const int64_t* positions = nullptr);

template <typename T>
void repeat_kv_forward_cuda(T* expanded, const T* packed, int64_t N, int64_t NH, int64_t NKV,
                            int64_t d, CudaContext& ctx);
template <typename T>
void repeat_kv_backward_cuda(T* dpacked, const T* dexpanded, int64_t N, int64_t NH, int64_t NKV,
                             int64_t d, CudaContext& ctx);

template <typename T>
void swiglu_forward_cuda(T* y, const T* gu, int64_t N, int64_t I, CudaContext& ctx);
template <typename T>
void swiglu_backward_cuda(T* dgu, const T* gu, const T* dy, int64_t N, int64_t I, CudaContext& ctx);

}  // namespace loom
