// General matrix multiply, row-major, the one GEMM entry point of the CPU backend.
//
//   C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C
//
// op(X) is X or X^T (trans_*). Leading dimensions are row strides in elements.
// float runs through oneDNN (AVX-512 kernels near the cores' peak); double is
// the reference path used by the finite-difference gradient checks.
#pragma once

#include <cstdint>

namespace loom {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// `batch` independent GEMMs, operand i at X + i * stride_x (attention's heads).
template <typename T>
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  T alpha, const T* A, int64_t lda, int64_t stride_a, const T* B, int64_t ldb,
                  int64_t stride_b, T beta, T* C, int64_t ldc, int64_t stride_c);

}  // namespace loom
