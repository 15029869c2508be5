// GEMM dispatch: fp32 and bf16 through oneDNN, fp64 through a plain reference loop.
//
// fp32 route, measured on 2 Zen 5 cores (oneDNN 2.6, BERT-base linears at 1024
// and 4096 tokens, every transpose; bench/bench_ops.cpp): dnnl_sgemm is as fast
// or faster (the nine GEMMs of a layer: 87 ms vs 94 ms at 1024 tokens, 340 vs
// 388 at 4096; matmul is ~25% slower on NN with K = 3072) except for mixed
// transposes with a long K and a small output (NT/TN, K >= 2N, M*N <= 1024*768,
// e.g. the FFN output projection at 1024 tokens), where sgemm drops to ~300
// GFLOP/s and the matmul primitive keeps ~380. The rule is static, never timed
// at run time: the same call always rounds the same way.
// double is only for gradient checks: correct, threaded, not tuned.
#include "ops/gemm.h"

#include <omp.h>

#include <bit>
#include <cstring>
#include <type_traits>
#include <oneapi/dnnl/dnnl.h>
#include <vector>

#include "core/check.h"
#include "ops/gemm_dnnl.h"

namespace loom {
namespace {

void check_gemm_args(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, int64_t lda,
                     int64_t ldb, int64_t ldc) {
    LOOM_ASSERT(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M={} N={} K={}", M, N, K);
    // Row strides must cover a stored row: (M, K) or (K, M) for A, (K, N) or (N, K) for B.
    LOOM_ASSERT(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N,
                "gemm: leading dimensions too small ({}{} M={} N={} K={} lda={} ldb={} ldc={})",
                trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, lda, ldb, ldc);
}

void sgemm_run(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc, const float* bias) {
    if (M == 0 || N == 0) return;
    const dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha,
                                        A, lda, B, ldb, beta, C, ldc);
    LOOM_CHECK(st == dnnl_success, "gemm: dnnl_sgemm ({}{} M={} N={} K={}) failed with status {}",
               trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, int(st));
    if (bias != nullptr) detail::add_bias_rows(C, ldc, bias, M, N);
}

// Reference double GEMM: op(B) packed once to (K, N), then each row of C is a
// sum of scaled rows of the pack (inner loop contiguous and vectorised).
void gemm_f64(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
              const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C,
              int64_t ldc, const double* bias) {
    if (M == 0 || N == 0) return;
    std::vector<double> bp(size_t(K * N));  // (K, N) = op(B)
    for (int64_t p = 0; p < K; ++p)
        for (int64_t j = 0; j < N; ++j)
            bp[size_t(p * N + j)] = trans_b ? B[j * ldb + p] : B[p * ldb + j];
    const bool par = !omp_in_parallel() && M * N * K > (1 << 16);
#pragma omp parallel if (par)
    {
        std::vector<double> acc(static_cast<size_t>(N));
#pragma omp for schedule(static)
        for (int64_t i = 0; i < M; ++i) {
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t p = 0; p < K; ++p) {
                const double a = trans_a ? A[p * lda + i] : A[i * lda + p];
                const double* brow = bp.data() + p * N;
#pragma omp simd
                for (int64_t j = 0; j < N; ++j) acc[size_t(j)] += a * brow[j];
            }
            double* c = C + i * ldc;
            for (int64_t j = 0; j < N; ++j) {
                double v = alpha * acc[size_t(j)];
                if (beta != 0.0) v += beta * c[j];
                if (bias != nullptr) v += bias[j];
                c[j] = v;
            }
        }
    }
}

}  // namespace

GemmImpl gemm_f32_route(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K) {
    const bool mixed = trans_a != trans_b;
    return mixed && K >= 2 * N && M * N <= 1024 * 768 ? GemmImpl::dnnl_matmul
                                                      : GemmImpl::dnnl_sgemm;
}

void gemm_f32_with(GemmImpl impl, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                   float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                   float beta, float* C, int64_t ldc, const float* bias) {
    check_gemm_args(trans_a, trans_b, M, N, K, lda, ldb, ldc);
    if (impl == GemmImpl::dnnl_sgemm)
        sgemm_run(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
    else
        detail::dnnl_matmul_run(detail::MatmulType::f32, trans_a, trans_b, M, N, K, alpha, A, lda,
                                B, ldb, beta, C, ldc, bias);
}

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc, const T* bias) {
    if constexpr (std::is_same_v<T, float>) {
        gemm_f32_with(gemm_f32_route(trans_a, trans_b, M, N, K), trans_a, trans_b, M, N, K, alpha,
                      A, lda, B, ldb, beta, C, ldc, bias);
    } else {
        check_gemm_args(trans_a, trans_b, M, N, K, lda, ldb, ldc);
        gemm_f64(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
    }
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t, const float*);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t, const double*);

template <typename T>
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  T alpha, const T* A, int64_t lda, int64_t stride_a, const T* B, int64_t ldb,
                  int64_t stride_b, T beta, T* C, int64_t ldc, int64_t stride_c) {
    if (batch <= 0) return;
    check_gemm_args(trans_a, trans_b, M, N, K, lda, ldb, ldc);
    // One item per thread at a time: attention's 128x128x64 GEMMs are too small
    // to split across cores, and there are B*NH of them.
#pragma omp parallel for schedule(static) if (batch > 1 && !omp_in_parallel())
    for (int64_t i = 0; i < batch; ++i)
        gemm<T>(trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb,
                beta, C + i * stride_c, ldc);
}

template void gemm_batched<float>(int64_t, bool, bool, int64_t, int64_t, int64_t, float,
                                  const float*, int64_t, int64_t, const float*, int64_t, int64_t,
                                  float, float*, int64_t, int64_t);
template void gemm_batched<double>(int64_t, bool, bool, int64_t, int64_t, int64_t, double,
                                   const double*, int64_t, int64_t, const double*, int64_t,
                                   int64_t, double, double*, int64_t, int64_t);

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C,
               int64_t ldc, const float* bias) {
    check_gemm_args(trans_a, trans_b, M, N, K, lda, ldb, ldc);
    detail::dnnl_matmul_run(detail::MatmulType::bf16, trans_a, trans_b, M, N, K, alpha, A, lda, B,
                            ldb, beta, C, ldc, bias);
}

void convert_f32_to_bf16(uint16_t* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (parallel: n > (1 << 16) && !omp_in_parallel())
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16_bits(inp[i]);
}

void convert_bf16_to_f32(float* out, const uint16_t* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (parallel: n > (1 << 16) && !omp_in_parallel())
    for (int64_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(uint32_t(inp[i]) << 16);
}

}  // namespace loom
