// Dropout with counter-based masks, vectorised Philox.
//
// keep(e) is DropoutSpec::keep exactly: uniform(e) = (bits >> 8) * 2^-24 >= p,
// which for integer bits is (bits >> 8) >= ceil(p * 2^24), an integer compare.
// Philox runs 16 counters side by side (structure of arrays) so the 32x32->64
// multiplies become AVX-512 vpmuludq; per element that is a few instructions
// instead of ~60 for one scalar Philox call per 4 elements.
#include "ops/dropout.h"

#include <omp.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>

namespace loom {
namespace {

constexpr int k_lanes = 16;                 // Philox blocks per batch
constexpr int k_batch_elems = 4 * k_lanes;  // draws per batch
constexpr int64_t k_chunk = 4096;           // elements per task (multiple of 64)

uint32_t keep_threshold(float p) {
    return uint32_t(std::ceil(double(p) * 16777216.0));
}

// bits[4l + r] = word r of Philox block (j0 + l), l < 16.
#if defined(__AVX512F__)
// Written out: from the plain loop GCC made 64-bit multiplies (vpmullq) of
// zero-extended halves and permuted them back, ~600 instructions a batch.
// Here a round is two full-width low products (vpmulld), the high halves from
// the even and odd lanes' 64-bit products (vpmuludq) and one three-way xor
// per word; the 16 blocks are transposed to element order at the end.
// GCC 12 warns inside its own intrinsics (an undefined merge source).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
inline __m512i mulhi_epu32(__m512i x, __m512i m) {
    const __m512i even = _mm512_srli_epi64(_mm512_mul_epu32(x, m), 32);
    const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(x, 32), m);
    return _mm512_mask_blend_epi32(__mmask16(0xAAAA), even, odd);
}

// j0 is a multiple of k_lanes (batches start at multiples of k_batch_elems
// draws), so the counter's low word never wraps inside a batch.
void philox_batch(const PhiloxStream& s, uint64_t j0, uint32_t* bits) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i x0 = _mm512_add_epi32(_mm512_set1_epi32(int(uint32_t(j0))), lane);
    __m512i x1 = _mm512_set1_epi32(int(uint32_t(j0 >> 32)));
    __m512i x2 = _mm512_set1_epi32(int(s.c2)), x3 = _mm512_set1_epi32(int(s.c3));
    const __m512i m0 = _mm512_set1_epi32(int(0xD2511F53u)),
                  m1 = _mm512_set1_epi32(int(0xCD9E8D57u));
    uint32_t k0 = s.key.k0, k1 = s.key.k1;
    for (int round = 0; round < 10; ++round) {
        const __m512i hi0 = mulhi_epu32(x0, m0), lo0 = _mm512_mullo_epi32(x0, m0);
        const __m512i hi1 = mulhi_epu32(x2, m1), lo1 = _mm512_mullo_epi32(x2, m1);
        // 0x96: a ^ b ^ c
        x0 = _mm512_ternarylogic_epi32(hi1, x1, _mm512_set1_epi32(int(k0)), 0x96);
        x2 = _mm512_ternarylogic_epi32(hi0, x3, _mm512_set1_epi32(int(k1)), 0x96);
        x1 = lo1;
        x3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    // (word, block) -> (block, word): 4 x 16 to 16 x 4.
    const __m512i t0 = _mm512_unpacklo_epi32(x0, x1), t1 = _mm512_unpackhi_epi32(x0, x1);
    const __m512i t2 = _mm512_unpacklo_epi32(x2, x3), t3 = _mm512_unpackhi_epi32(x2, x3);
    // Per 128-bit lane q: u0 holds blocks 4q, u1 4q+1, u2 4q+2, u3 4q+3 (words 0-3 each).
    const __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
    const __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
    // Output vector q holds blocks 4q..4q+3 in order: lane q of u0, u1, u2, u3.
    const __m512i a = _mm512_shuffle_i32x4(u0, u1, 0x44), b = _mm512_shuffle_i32x4(u2, u3, 0x44);
    const __m512i c = _mm512_shuffle_i32x4(u0, u1, 0xEE), d = _mm512_shuffle_i32x4(u2, u3, 0xEE);
    // a = u0.q0 u0.q1 u1.q0 u1.q1, b = u2.q0 u2.q1 u3.q0 u3.q1 (c, d: q2, q3).
    _mm512_storeu_si512(bits + 0, _mm512_shuffle_i32x4(a, b, 0x88));   // q0: u0 u1 u2 u3
    _mm512_storeu_si512(bits + 16, _mm512_shuffle_i32x4(a, b, 0xDD));  // q1
    _mm512_storeu_si512(bits + 32, _mm512_shuffle_i32x4(c, d, 0x88));  // q2
    _mm512_storeu_si512(bits + 48, _mm512_shuffle_i32x4(c, d, 0xDD));  // q3
}
#pragma GCC diagnostic pop
#else
void philox_batch(const PhiloxStream& s, uint64_t j0, uint32_t* bits) {
    uint32_t x0[k_lanes], x1[k_lanes], x2[k_lanes], x3[k_lanes];
    for (int l = 0; l < k_lanes; ++l) {
        const uint64_t j = j0 + uint64_t(l);
        x0[l] = uint32_t(j);
        x1[l] = uint32_t(j >> 32);
        x2[l] = s.c2;
        x3[l] = s.c3;
    }
    uint32_t k0 = s.key.k0, k1 = s.key.k1;
    for (int round = 0; round < 10; ++round) {
#pragma omp simd
        for (int l = 0; l < k_lanes; ++l) {
            const uint64_t p0 = uint64_t(0xD2511F53u) * x0[l];
            const uint64_t p1 = uint64_t(0xCD9E8D57u) * x2[l];
            const uint32_t n0 = uint32_t(p1 >> 32) ^ x1[l] ^ k0;
            const uint32_t n2 = uint32_t(p0 >> 32) ^ x3[l] ^ k1;
            x1[l] = uint32_t(p1);
            x3[l] = uint32_t(p0);
            x0[l] = n0;
            x2[l] = n2;
        }
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    for (int l = 0; l < k_lanes; ++l) {
        bits[4 * l + 0] = x0[l];
        bits[4 * l + 1] = x1[l];
        bits[4 * l + 2] = x2[l];
        bits[4 * l + 3] = x3[l];
    }
}
#endif

// Multipliers for global elements [first, first + n), single-threaded.
template <typename T>
void multipliers_serial(T* f, const DropoutSpec& d, uint64_t first, int64_t n) {
    const uint32_t thr = keep_threshold(d.p);
    const T scale = dropout_scale<T>(d);
    uint32_t bits[k_batch_elems];
    int64_t i = 0;
    while (i < n) {
        const uint64_t e = first + uint64_t(i);
        const uint64_t batch_first = e / k_batch_elems * k_batch_elems;
        philox_batch(d.stream, batch_first / 4, bits);
        const int off = int(e - batch_first);
        const int64_t take = std::min<int64_t>(k_batch_elems - off, n - i);
        T* out = f + i;
        const uint32_t* b = bits + off;
#pragma omp simd
        for (int64_t t = 0; t < take; ++t) out[t] = (b[t] >> 8) >= thr ? scale : T(0);
        i += take;
    }
}

// y[i] = x[i] * f(first + i) over [0, n), threaded in chunks.
template <typename T>
void apply(T* y, const T* x, uint64_t first, int64_t n, const DropoutSpec& d) {
    if (!d.active()) {
        if (y != x) std::copy(x, x + n, y);
        return;
    }
#pragma omp parallel if (n > k_chunk && !omp_in_parallel())
    {
        T f[k_chunk];
#pragma omp for schedule(dynamic, 1)
        for (int64_t c = 0; c < n; c += k_chunk) {
            const int64_t len = std::min<int64_t>(k_chunk, n - c);
            multipliers_serial(f, d, first + uint64_t(c), len);
#pragma omp simd
            for (int64_t t = 0; t < len; ++t) y[c + t] = x[c + t] * f[t];
        }
    }
}

}  // namespace

template <typename T>
void dropout_multipliers(T* f, const DropoutSpec& d, uint64_t first, int64_t n) {
    if (!d.active()) {
        std::fill(f, f + n, T(1));
        return;
    }
#pragma omp parallel for schedule(dynamic, 1) if (n > k_chunk && !omp_in_parallel())
    for (int64_t c = 0; c < n; c += k_chunk)
        multipliers_serial(f + c, d, first + uint64_t(c), std::min<int64_t>(k_chunk, n - c));
}

template <typename T>
void dropout_forward(T* out, const T* inp, int64_t B, int64_t per_sample, const DropoutSpec& d) {
    // Samples are contiguous, so the batch is one run of global elements.
    apply(out, inp, uint64_t(d.sample_offset) * uint64_t(per_sample), B * per_sample, d);
}

template <typename T>
void dropout_backward(T* dinp, const T* dout, int64_t B, int64_t per_sample, const DropoutSpec& d) {
    // The same mask and scale: d(x * f)/dx = f.
    apply(dinp, dout, uint64_t(d.sample_offset) * uint64_t(per_sample), B * per_sample, d);
}

template <typename T>
void dropout_rows(T* out, const T* in, const int64_t* rows, int64_t M, int64_t seq_len,
                  int64_t width, const DropoutSpec& d) {
    for (int64_t r = 0; r < M; ++r) {
        const int64_t b = rows[r] / seq_len, t = rows[r] % seq_len;
        const uint64_t first =
            (uint64_t(d.sample_offset + b) * uint64_t(seq_len) + uint64_t(t)) * uint64_t(width);
        apply(out + r * width, in + r * width, first, width, d);
    }
}

template void dropout_multipliers<float>(float*, const DropoutSpec&, uint64_t, int64_t);
template void dropout_multipliers<double>(double*, const DropoutSpec&, uint64_t, int64_t);
template void dropout_forward<float>(float*, const float*, int64_t, int64_t, const DropoutSpec&);
template void dropout_forward<double>(double*, const double*, int64_t, int64_t, const DropoutSpec&);
template void dropout_backward<float>(float*, const float*, int64_t, int64_t, const DropoutSpec&);
template void dropout_backward<double>(double*, const double*, int64_t, int64_t,
                                       const DropoutSpec&);

template void dropout_rows<float>(float*, const float*, const int64_t*, int64_t, int64_t, int64_t,
                                  const DropoutSpec&);
template void dropout_rows<double>(double*, const double*, const int64_t*, int64_t, int64_t,
                                   int64_t, const DropoutSpec&);

}  // namespace loom
