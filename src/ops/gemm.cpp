// GEMM dispatch: fp32 and bf16 through oneDNN, fp64 through a plain reference loop.
// bf16 on a CPU without oneDNN bf16 kernels: fp32 copies through the fp32 route.
//
// fp32 route, measured on 2 Zen 5 cores (oneDNN 2.6, BERT-base linears at 1024
// and 4096 tokens, every transpose; bench/bench_ops.cpp): dnnl_sgemm is as fast
// or faster (the nine GEMMs of a layer: 87 ms vs 94 ms at 1024 tokens, 340 vs
// 388 at 4096; matmul is ~25% slower on NN with K = 3072) except for mixed
// transposes with a long K and a small output (NT/TN, K >= 2N, M*N <= 1024*768,
// e.g. the FFN output projection at 1024 tokens), where sgemm drops to ~300
// GFLOP/s and the matmul primitive keeps ~380. The rule is static, never timed
// at run time: the same call always rounds the same way.
// On AVX2 (no AVX-512) oneDNN 2.6's sgemm runs a B operand that starts on a
// 32-byte boundary at about half speed at a few hundred rows; the parameter
// table starts its rows off that boundary (nn/param_table.cpp), and so do
// the widened bf16 copies below (gemm_operand_buffer).
// double is only for gradient checks: correct, threaded, not tuned.
#include "ops/gemm.h"

#include <omp.h>

#include <oneapi/dnnl/dnnl.h>
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "ops/gemm_dnnl.h"
#include "ops/gemm_pieces.h"

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
    if (K == 0) {
        // dnnl_sgemm rejects K = 0; the matmul runner gives C = beta * C (+ bias).
        detail::dnnl_matmul_run(detail::MatmulType::f32, trans_a, trans_b, M, N, K, alpha, A, lda,
                                B, ldb, beta, C, ldc, bias);
        return;
    }
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

// Runs `whole_gemm(piece)` for each of gemm_pieces' pieces, taken by the team
// as threads come free; false (nothing run) when the GEMM is not split, or
// when called from inside a parallel region (it then runs on this thread).
template <typename Run>
bool run_in_pieces(int64_t M, int64_t N, int64_t K, const Run& whole_gemm) {
    if (omp_in_parallel()) return false;
    const std::vector<GemmPiece> pieces = gemm_pieces(M, N, K, omp_get_max_threads());
    if (pieces.empty()) return false;
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t p = 0; p < pieces.size(); ++p) whole_gemm(pieces[p]);
    return true;
}

// op(X)'s rows [r, ...) when X is stored (rows, ld) or, transposed, (ld-wide columns).
template <typename T>
const T* rows_of(const T* X, bool trans, int64_t ld, int64_t r) {
    return trans ? X + r : X + r * ld;
}
// op(X)'s columns [c, ...).
template <typename T>
const T* cols_of(const T* X, bool trans, int64_t ld, int64_t c) {
    return trans ? X + c * ld : X + c;
}

}  // namespace

float* gemm_operand_buffer(std::vector<float>& w, int64_t n) {
    constexpr int64_t k_slack = 16;  // floats: room to move the start
    if (int64_t(w.size()) < n + k_slack) w.resize(size_t(n + k_slack));
    const auto at = int64_t(reinterpret_cast<uintptr_t>(w.data()) % 64);  // malloc: 0 .. 48
    return w.data() + (64 + k_gemm_operand_skew_bytes - at) % 64 / int64_t(sizeof(float));
}

GemmImpl gemm_f32_route(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K) {
    const bool mixed = trans_a != trans_b;
    return mixed && K >= 2 * N && M * N <= 1024 * 768 ? GemmImpl::dnnl_matmul
                                                      : GemmImpl::dnnl_sgemm;
}

void gemm_f32_with(GemmImpl impl, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                   float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                   float beta, float* C, int64_t ldc, const float* bias) {
    check_gemm_args(trans_a, trans_b, M, N, K, lda, ldb, ldc);
    if (run_in_pieces(M, N, K, [&](const GemmPiece& p) {
            gemm_f32_with(impl, trans_a, trans_b, p.rows, p.cols, K, alpha,
                          rows_of(A, trans_a, lda, p.row), lda, cols_of(B, trans_b, ldb, p.col),
                          ldb, beta, C + p.row * ldc + p.col, ldc, bias ? bias + p.col : nullptr);
        }))
        return;
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
#pragma omp parallel for schedule(dynamic, 1) if (batch > 1 && !omp_in_parallel())
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

namespace {

void widen_row(float* y, const uint16_t* x, int64_t n) {
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) y[c] = std::bit_cast<float>(uint32_t(x[c]) << 16);
}

// bf16 -> fp32 of (rows, cols) values with row stride ld, packed (stride cols).
// split: the rows are shared among the threads of the enclosing team, every one
// of which must call this; otherwise the calling thread does them all.
void widen_rows(float* out, const uint16_t* in, int64_t rows, int64_t cols, int64_t ld,
                bool split) {
    if (split) {
#pragma omp for schedule(dynamic, 16) nowait
        for (int64_t r = 0; r < rows; ++r) widen_row(out + r * cols, in + r * ld, cols);
    } else {
        for (int64_t r = 0; r < rows; ++r) widen_row(out + r * cols, in + r * ld, cols);
    }
}

// The fp32 copies cover at most this many of K at a time, so they stay within
// (M + N) * 4 KiB whatever K is (the dweight GEMM's K is the token count),
// while each panel still gives the fp32 GEMM a K long enough to run at speed.
constexpr int64_t k_widen_panel = 1024;

void gemm_bf16_widened(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta,
                       float* C, int64_t ldc, const float* bias) {
    if (M == 0 || N == 0) return;
    if (K == 0) {
        // C = beta * C (+ bias) without reading A or B; the matmul runner does that.
        detail::dnnl_matmul_run(detail::MatmulType::f32, trans_a, trans_b, M, N, K, alpha, A, lda,
                                B, ldb, beta, C, ldc, bias);
        return;
    }
    // Equal panels: a short last one would be a slow GEMM of its own.
    const int64_t panels = (K + k_widen_panel - 1) / k_widen_panel;
    const int64_t kb_max = (K + panels - 1) / panels;
    // Per thread: attention calls this from inside its parallel region.
    // Grown, never shrunk: fresh pages are slow to touch, and training repeats
    // the same few shapes.
    thread_local std::vector<float> a_buf, b_buf;
    float* a = gemm_operand_buffer(a_buf, M * kb_max);
    float* b = gemm_operand_buffer(b_buf, kb_max * N);
    for (int64_t k0 = 0; k0 < K; k0 += kb_max) {
        const int64_t kb = std::min(kb_max, K - k0);
        auto widen_panel = [&](bool split) {
            // op(A)'s columns k0.. are rows of A when it is stored transposed.
            if (trans_a)
                widen_rows(a, A + k0 * lda, kb, M, lda, split);
            else
                widen_rows(a, A + k0, M, kb, lda, split);
            if (trans_b)
                widen_rows(b, B + k0, N, kb, ldb, split);
            else
                widen_rows(b, B + k0 * ldb, kb, N, ldb, split);
        };
        // One team for both operands: a barrier less per panel. Calls from
        // inside a parallel region (attention's thousands of small GEMMs) stay
        // on their thread without opening even an inactive nested region.
        if ((M + N) * kb > (1 << 16) && !omp_in_parallel()) {
#pragma omp parallel
            widen_panel(true);
        } else {
            widen_panel(false);
        }
        // Later panels add to C; the bias goes in once, with the last.
        const bool last = k0 + kb == K;
        gemm<float>(trans_a, trans_b, M, N, kb, alpha, a, trans_a ? M : kb, b, trans_b ? kb : N,
                    k0 == 0 ? beta : 1.0f, C, ldc, last ? bias : nullptr);
    }
}

}  // namespace

Bf16Impl gemm_bf16_route() {
    return detail::dnnl_bf16_matmul_available() ? Bf16Impl::dnnl_bf16 : Bf16Impl::widen_f32;
}

void gemm_bf16_with(Bf16Impl impl, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                    float alpha, const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb,
                    float beta, float* C, int64_t ldc, const float* bias) {
    check_gemm_args(trans_a, trans_b, M, N, K, lda, ldb, ldc);
    // The widened route's fp32 GEMMs are split themselves, panel by panel.
    if (impl == Bf16Impl::dnnl_bf16 && run_in_pieces(M, N, K, [&](const GemmPiece& p) {
            gemm_bf16_with(impl, trans_a, trans_b, p.rows, p.cols, K, alpha,
                           rows_of(A, trans_a, lda, p.row), lda, cols_of(B, trans_b, ldb, p.col),
                           ldb, beta, C + p.row * ldc + p.col, ldc, bias ? bias + p.col : nullptr);
        }))
        return;
    if (impl == Bf16Impl::dnnl_bf16)
        detail::dnnl_matmul_run(detail::MatmulType::bf16, trans_a, trans_b, M, N, K, alpha, A, lda,
                                B, ldb, beta, C, ldc, bias);
    else
        gemm_bf16_widened(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C,
               int64_t ldc, const float* bias) {
    gemm_bf16_with(gemm_bf16_route(), trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
                   ldc, bias);
}

void convert_f32_to_bf16(uint16_t* out, const float* inp, int64_t n) {
    const bool par = n > (1 << 16) && !omp_in_parallel();
#pragma omp parallel for simd schedule(dynamic, 8192) if (parallel : par)
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16_bits(inp[i]);
}

void convert_bf16_to_f32(float* out, const uint16_t* inp, int64_t n) {
    const bool par = n > (1 << 16) && !omp_in_parallel();
#pragma omp parallel for simd schedule(dynamic, 8192) if (parallel : par)
    for (int64_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(uint32_t(inp[i]) << 16);
}

}  // namespace loom
