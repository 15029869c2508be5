// General matrix multiply, row-major, the one GEMM entry point of the CPU backend.
//
//   C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C [+ bias (N) on every row]
//
// op(X) is X or X^T (trans_*). Leading dimensions are row strides in elements.
// float runs through oneDNN (AVX-512 or AVX2 kernels near the cores' peak); double is
// the reference path used by the finite-difference gradient checks. beta == 0
// never reads C (BLAS semantics: garbage or NaN in C is fine).
//
// Every entry point may be called from inside an OpenMP parallel region: it then
// runs on the calling thread only (gemm_batched relies on that). Outside one, a
// large fp32 or bf16 GEMM is shared among the team in pieces (ops/gemm_pieces.h).
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

namespace loom {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc, const T* bias = nullptr);

// `batch` independent GEMMs, operand i at X + i * stride_x (attention's heads).
// Parallel over the batch, one single-threaded GEMM per item.
template <typename T>
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  T alpha, const T* A, int64_t lda, int64_t stride_a, const T* B, int64_t ldb,
                  int64_t stride_b, T beta, T* C, int64_t ldc, int64_t stride_c);

// Mixed precision: bf16 operands (raw bits, as core/dtype.h's f32_to_bf16 makes
// them), fp32 accumulation and fp32 C. Same semantics as gemm<float>.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C,
               int64_t ldc, const float* bias = nullptr);

// The two routes of gemm_bf16. oneDNN 2.x multiplies bf16 only on AVX-512
// cores; elsewhere the operands are widened to fp32, which is exact, as is the
// fp32 product of two bf16 values, so the fp32 GEMM computes the same products
// with fp32 accumulation (another summation order) at fp32 speed.
enum class Bf16Impl {
    dnnl_bf16,  // oneDNN's bf16 matmul primitive
    widen_f32,  // fp32 copies of K-panels of the operands, then gemm<float>
};
// The route gemm_bf16 takes on this machine: dnnl_bf16 where oneDNN can make
// the primitive (decided once per process), else widen_f32.
Bf16Impl gemm_bf16_route();
void gemm_bf16_with(Bf16Impl impl, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                    float alpha, const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb,
                    float beta, float* C, int64_t ldc, const float* bias = nullptr);

// fp32 <-> bf16 over a buffer (round to nearest even), threaded and vectorised.
void convert_f32_to_bf16(uint16_t* out, const float* inp, int64_t n);
// One element of it, branch-free so loops around it vectorise: core/dtype.h's
// f32_to_bf16 rule (NaN stays a quiet NaN).
inline uint16_t f32_to_bf16_bits(float x) {
    const uint32_t u = std::bit_cast<uint32_t>(x);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return uint16_t(nan ? ((u >> 16) | 0x40u) : rounded);
}
void convert_bf16_to_f32(float* out, const uint16_t* inp, int64_t n);

// The two oneDNN routes for fp32. gemm<float> picks one by shape with a fixed
// rule (gemm.cpp: measured on BERT-base shapes), so a given call always takes
// the same route and rounds the same way; both stay callable for benchmarks.
enum class GemmImpl {
    dnnl_sgemm,   // dnnl_sgemm, the BLAS-like call (bias added in a second pass)
    dnnl_matmul,  // matmul primitive from a shape-keyed cache, bias fused
};
GemmImpl gemm_f32_route(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K);
void gemm_f32_with(GemmImpl impl, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                   float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                   float beta, float* C, int64_t ldc, const float* bias = nullptr);

// Bytes past a 64-byte boundary where a B operand starts for oneDNN's AVX2
// sgemm to read it at full speed (the note in gemm.cpp); the CPU's parameter
// rows start there (nn/param_table.cpp).
inline constexpr int64_t k_gemm_operand_skew_bytes = 16;

// `n` floats of `w` (grown, never shrunk) starting k_gemm_operand_skew_bytes
// past a 64-byte boundary: for scratch B operands whose speed must not depend
// on where malloc put them.
float* gemm_operand_buffer(std::vector<float>& w, int64_t n);

}  // namespace loom
