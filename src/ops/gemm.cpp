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

#include <immintrin.h>
#include <omp.h>

#include <oneapi/dnnl/dnnl.h>
#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>
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
    const dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A,
                                        lda, B, ldb, beta, C, ldc);
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
                                   const double*, int64_t, int64_t, const double*, int64_t, int64_t,
                                   double, double*, int64_t, int64_t);

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C,
               int64_t ldc, const float* bias) {
    check_gemm_args(trans_a, trans_b, M, N, K, lda, ldb, ldc);
    detail::dnnl_matmul_run(detail::MatmulType::bf16, trans_a, trans_b, M, N, K, alpha, A, lda, B,
                            ldb, beta, C, ldc, bias);
}

namespace {
constexpr int64_t k_pack_k = 32, k_pack_n = 64;  // BA16a64b2a's block: 16x2 K by 64 N
int64_t round_up(int64_t x, int64_t m) {
    return (x + m - 1) / m * m;
}
}  // namespace

int64_t packed_b_size(int64_t K, int64_t N) {
    return round_up(K, k_pack_k) * round_up(N, k_pack_n);
}

// Block (kb, nb) is 2048 contiguous elements at ((nb * K_blocks) + kb) * 2048;
// inside it B[kb*32 + 2*i + p][nb*64 + j] sits at (i * 64 + j) * 2 + p.
void pack_b_bf16(uint16_t* dst, const float* src, int64_t K, int64_t N, bool trans_src) {
    LOOM_ASSERT(K > 0 && N > 0, "pack_b_bf16: empty operand ({} x {})", K, N);
    const int64_t kblocks = round_up(K, k_pack_k) / k_pack_k;
    const int64_t nblocks = round_up(N, k_pack_n) / k_pack_n;
#pragma omp parallel for collapse(2) schedule(static) if (K * N > (1 << 15) && !omp_in_parallel())
    for (int64_t nb = 0; nb < nblocks; ++nb)
        for (int64_t kb = 0; kb < kblocks; ++kb) {
            uint16_t* blk = dst + (nb * kblocks + kb) * k_pack_k * k_pack_n;
            const int64_t k0 = kb * k_pack_k, n0 = nb * k_pack_n;
            const bool whole = k0 + k_pack_k <= K && n0 + k_pack_n <= N;
            if (whole && trans_src) {
                // Row n of src holds the block's 32 K values of column n: round
                // them into 16 (k, k+1) pairs, then transpose the 64 x 16 pairs.
                uint32_t pairs[k_pack_n][k_pack_k / 2];
                for (int64_t j = 0; j < k_pack_n; ++j) {
                    const float* row = src + (n0 + j) * K + k0;
#pragma omp simd
                    for (int64_t i = 0; i < k_pack_k / 2; ++i)
                        pairs[j][i] = uint32_t(f32_to_bf16_bits(row[2 * i])) |
                                      uint32_t(f32_to_bf16_bits(row[2 * i + 1])) << 16;
                }
                uint32_t line[k_pack_n];
                for (int64_t i = 0; i < k_pack_k / 2; ++i) {
                    for (int64_t j = 0; j < k_pack_n; ++j) line[j] = pairs[j][i];
                    std::memcpy(blk + i * k_pack_n * 2, line, sizeof line);
                }
            } else if (whole) {
                for (int64_t i = 0; i < k_pack_k / 2; ++i) {
                    const float* r0 = src + (k0 + 2 * i) * N + n0;
                    const float* r1 = r0 + N;
                    uint16_t* out = blk + i * k_pack_n * 2;
#pragma omp simd
                    for (int64_t j = 0; j < k_pack_n; ++j) {
                        out[2 * j] = f32_to_bf16_bits(r0[j]);
                        out[2 * j + 1] = f32_to_bf16_bits(r1[j]);
                    }
                }
            } else {
                for (int64_t i = 0; i < k_pack_k / 2; ++i)
                    for (int64_t j = 0; j < k_pack_n; ++j)
                        for (int64_t p = 0; p < 2; ++p) {
                            const int64_t k = k0 + 2 * i + p, n = n0 + j;
                            const float v = k < K && n < N
                                                ? (trans_src ? src[n * K + k] : src[k * N + n])
                                                : 0.0f;
                            blk[(i * k_pack_n + j) * 2 + p] = f32_to_bf16_bits(v);
                        }
            }
        }
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
// GCC 12 warns inside its own unpack intrinsics (an undefined merge source).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// In-register transpose of 16 rows of 16 32-bit lanes (one bf16 pair each).
inline void transpose16x16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) {
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 2; ++i)
        for (int k = 0; k < 4; ++k) {
            t[8 * i + k] = _mm512_shuffle_i32x4(r[8 * i + k], r[8 * i + k + 4], 0x88);
            t[8 * i + k + 4] = _mm512_shuffle_i32x4(r[8 * i + k], r[8 * i + k + 4], 0xdd);
        }
    for (int k = 0; k < 8; ++k) {
        r[k] = _mm512_shuffle_i32x4(t[k], t[k + 8], 0x88);
        r[k + 8] = _mm512_shuffle_i32x4(t[k], t[k + 8], 0xdd);
    }
}
#pragma GCC diagnostic pop
#endif

// Tiles of 64 x 64 of src: rounded once into t, then written to the two
// packed operands. For packed_ab (K = rows) the tile is two K-blocks of one
// N-block, rows interleaved in pairs; for packed_ba (K = columns) it is two
// K-blocks of one N-block of the transpose, column pairs transposed.
void pack_b_bf16_both(uint16_t* packed_ab, uint16_t* packed_ba, const float* src, int64_t R,
                      int64_t Cs) {
    LOOM_ASSERT(R > 0 && Cs > 0, "pack_b_bf16_both: empty operand ({} x {})", R, Cs);
    constexpr int64_t tile = 64, half = k_pack_k, pairs = k_pack_k / 2, block = k_pack_k * k_pack_n;
    const int64_t rtiles = (R + tile - 1) / tile, ctiles = (Cs + tile - 1) / tile;
    const int64_t ab_kblocks = round_up(R, k_pack_k) / k_pack_k;   // K = R
    const int64_t ba_kblocks = round_up(Cs, k_pack_k) / k_pack_k;  // K = Cs
#pragma omp parallel for collapse(2) schedule(static) if (R * Cs > (1 << 15) && !omp_in_parallel())
    for (int64_t rt = 0; rt < rtiles; ++rt)
        for (int64_t ct = 0; ct < ctiles; ++ct) {
            const int64_t r0 = rt * tile, c0 = ct * tile;
            alignas(64) uint16_t t[tile][tile];  // rounded tile, zero past the edges
            const int64_t rn = std::min(tile, R - r0), cn = std::min(tile, Cs - c0);
            for (int64_t r = 0; r < tile; ++r) {
                const float* row = src + (r0 + r) * Cs + c0;
                if (r < rn && cn == tile) {
#pragma omp simd
                    for (int64_t c = 0; c < tile; ++c) t[r][c] = f32_to_bf16_bits(row[c]);
                } else {
                    for (int64_t c = 0; c < tile; ++c)
                        t[r][c] = r < rn && c < cn ? f32_to_bf16_bits(row[c]) : uint16_t(0);
                }
            }
            // packed_ab: N-block ct (64 columns), K-blocks 2 rt and 2 rt + 1 (each may
            // be padding only when R ends inside the tile).
            for (int64_t h = 0; h < 2; ++h) {
                const int64_t kb = 2 * rt + h;
                if (kb >= ab_kblocks) break;
                uint16_t* blk = packed_ab + (ct * ab_kblocks + kb) * block;
                for (int64_t i = 0; i < pairs; ++i) {
                    const uint16_t* a = t[h * half + 2 * i];
                    const uint16_t* b = t[h * half + 2 * i + 1];
                    uint16_t* out = blk + i * k_pack_n * 2;
#if defined(__AVX512F__) && defined(__AVX512BW__)
                    // a0 b0 a1 b1 ...: lanes 0-31 index a, 32-63 index b.
                    alignas(64) static constexpr uint16_t lo[32] = {
                        0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                        8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
                    alignas(64) static constexpr uint16_t hi[32] = {
                        16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                        24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
                    const __m512i ilo = _mm512_load_si512(lo), ihi = _mm512_load_si512(hi);
                    for (int64_t q = 0; q < 2; ++q) {
                        const __m512i va = _mm512_load_si512(a + 32 * q);
                        const __m512i vb = _mm512_load_si512(b + 32 * q);
                        _mm512_storeu_si512(out + 64 * q, _mm512_permutex2var_epi16(va, ilo, vb));
                        _mm512_storeu_si512(out + 64 * q + 32,
                                            _mm512_permutex2var_epi16(va, ihi, vb));
                    }
#else
                    for (int64_t j = 0; j < k_pack_n; ++j) {
                        out[2 * j] = a[j];
                        out[2 * j + 1] = b[j];
                    }
#endif
                }
            }
            // packed_ba: N-block rt (64 rows of src), K-blocks 2 ct and 2 ct + 1.
            for (int64_t h = 0; h < 2; ++h) {
                const int64_t kb = 2 * ct + h;
                if (kb >= ba_kblocks) break;
                uint16_t* blk = packed_ba + (rt * ba_kblocks + kb) * block;
#if defined(__AVX512F__) && defined(__AVX512BW__)
                // Rows of t as 32 pairs; pair column (h * 16 + i) of rows j becomes
                // line i of the block: 64 x 16 pairs transposed, 16 rows at a time.
                for (int64_t jb = 0; jb < k_pack_n / 16; ++jb) {
                    __m512i r[16];
                    for (int k = 0; k < 16; ++k)
                        r[k] = _mm512_load_si512(&t[jb * 16 + k][h * half]);
                    transpose16x16(r);
                    for (int64_t i = 0; i < pairs; ++i)
                        _mm512_storeu_si512(blk + (i * k_pack_n + jb * 16) * 2, r[i]);
                }
#else
                uint32_t line[k_pack_n];
                for (int64_t i = 0; i < pairs; ++i) {
                    for (int64_t j = 0; j < k_pack_n; ++j)
                        line[j] = uint32_t(t[j][h * half + 2 * i]) |
                                  uint32_t(t[j][h * half + 2 * i + 1]) << 16;
                    std::memcpy(blk + i * k_pack_n * 2, line, sizeof line);
                }
#endif
            }
        }
}

void gemm_bf16_packed_b(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha,
                        const uint16_t* A, int64_t lda, const uint16_t* B_packed, float beta,
                        float* C, int64_t ldc, const float* bias) {
    check_gemm_args(trans_a, false, M, N, K, lda, N, ldc);
    detail::dnnl_matmul_run(detail::MatmulType::bf16_packed_b, trans_a, false, M, N, K, alpha, A,
                            lda, B_packed, 0, beta, C, ldc, bias);
}

void convert_f32_to_bf16(uint16_t* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : n > (1 << 16) && !omp_in_parallel())
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16_bits(inp[i]);
}

void convert_bf16_to_f32(float* out, const uint16_t* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : n > (1 << 16) && !omp_in_parallel())
    for (int64_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(uint32_t(inp[i]) << 16);
}

}  // namespace loom
