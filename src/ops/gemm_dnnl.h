// oneDNN matmul primitives behind gemm<float> and gemm_bf16 (private to src/ops).
//
// Creating a primitive costs far more than a BERT-sized GEMM's dispatch, so
// primitives are cached by everything that shapes the kernel (types, transposes,
// sizes, strides, alpha, beta, bias, thread count). Scratchpads are per thread,
// so cached primitives may run from several threads at once.
#pragma once

#include <cstdint>

namespace loom::detail {

enum class MatmulType { f32, bf16 };

// C = alpha * op(A) @ op(B) + beta * C (+ bias (N) per row), as gemm<float>.
void dnnl_matmul_run(MatmulType type, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                     float alpha, const void* A, int64_t lda, const void* B, int64_t ldb,
                     float beta, float* C, int64_t ldc, const float* bias);

// Whether oneDNN can make a bf16 matmul primitive on this CPU, probed once per
// process. oneDNN 2.x implements bf16 matmul for AVX-512 cores only (or fewer,
// under DNNL_MAX_CPU_ISA): on an AVX2 CPU no shape gets one, so a single small
// probe stands for all.
bool dnnl_bf16_matmul_available();

// Adds bias (N) to each of M rows of C (row stride ldc).
void add_bias_rows(float* C, int64_t ldc, const float* bias, int64_t M, int64_t N);

}  // namespace loom::detail
