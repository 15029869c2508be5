// Row-major GEMM on cuBLASLt, the one GEMM entry point of the CUDA backend.
//
//   C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C      (as ops/gemm.h)
//
// T is float, __nv_bfloat16 or __half; accumulation is always fp32
// (CUBLAS_COMPUTE_32F; TF32 only when CublasHandle::allow_tf32). Leading
// dimensions are row strides in elements. Row-major is mapped onto cuBLAS's
// column-major by computing C^T = op(B)^T op(A)^T, so no operand is copied.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_context.h"

namespace loom {

template <typename T>
void gemm_cuda(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const T* A,
               int64_t lda, const T* B, int64_t ldb, float beta, T* C, int64_t ldc,
               CudaContext& ctx);

// `batch` independent GEMMs, operand i at X + i * stride_x (attention's heads).
template <typename T>
void gemm_batched_cuda(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                       float alpha, const T* A, int64_t lda, int64_t stride_a, const T* B,
                       int64_t ldb, int64_t stride_b, float beta, T* C, int64_t ldc,
                       int64_t stride_c, CudaContext& ctx);

// As gemm_batched_cuda with an fp32 C: T operands, fp32 accumulation kept in
// the output (attention scores go into the softmax unrounded).
template <typename T>
void gemm_batched_f32out_cuda(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N,
                              int64_t K, float alpha, const T* A, int64_t lda, int64_t stride_a,
                              const T* B, int64_t ldb, int64_t stride_b, float beta, float* C,
                              int64_t ldc, int64_t stride_c, CudaContext& ctx);

// Epilogue-fused form: C = op(A) op(B) + bias (bias (N) broadcast over rows),
// beta 0. Returns false, having done nothing, when cuBLASLt has no kernel for
// it or the bias is not 16-byte aligned; the caller then runs the plain GEMM
// and a separate bias kernel.
template <typename T>
bool gemm_bias_epilogue_cuda(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                             const T* A, int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc,
                             const T* bias, CudaContext& ctx);

}  // namespace loom
