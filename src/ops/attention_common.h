// What the whole-sequence attention kernels (attention.cpp) and the query-subset
// ones (attention_rows.cpp) share: geometry, the key mask, the scale and the
// row softmax forward and backward, so both give the same numbers per row.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/check.h"
#include "ops/attention.h"
#include "ops/vec_math.h"

namespace loom::detail {

struct Geometry {
    int64_t B, T, NH, HS, C, ld, NH_total;
    uint64_t drop_base(int64_t sample_offset, int64_t head_offset, int64_t b, int64_t h) const {
        return (uint64_t(sample_offset + b) * uint64_t(NH_total) + uint64_t(head_offset + h)) *
               uint64_t(T * T);
    }
};

inline Geometry geometry_of(const AttnShape& s, int64_t ld) {
    const int64_t nh_total = s.NH_total > 0 ? s.NH_total : s.NH;
    LOOM_ASSERT(s.B >= 0 && s.T > 0 && s.NH > 0 && s.HS > 0,
                "attention: bad shape B={} T={} NH={} HS={}", s.B, s.T, s.NH, s.HS);
    LOOM_ASSERT(ld >= s.NH * s.HS, "attention: row stride {} < NH*HS = {}", ld, s.NH * s.HS);
    LOOM_ASSERT(s.head_offset >= 0 && s.head_offset + s.NH <= nh_total,
                "attention: heads [{}, {}) outside NH_total {}", s.head_offset,
                s.head_offset + s.NH, nh_total);
    return {s.B, s.T, s.NH, s.HS, s.NH * s.HS, ld, nh_total};
}

// visible[b * T + j] = key j of sample b may be attended to (padding only).
inline std::vector<unsigned char> visible_keys(const AttnMask& mask, int64_t B, int64_t T) {
    std::vector<unsigned char> vis(size_t(B * T), 1);
    if (mask.key_padding != nullptr)
        for (int64_t i = 0; i < B * T; ++i) vis[size_t(i)] = mask.key_padding[i] != 0;
    return vis;
}

template <typename T>
T attn_scale(int64_t HS) {
    return T(1) / std::sqrt(T(HS));
}

// Softmax of one score row in place. `visible` (T) is the key-padding mask of
// this sample (1 = attend); only keys j < limit are causally allowed.
// Returns false when the row had no visible key; it is then uniform over the
// keys HF's arithmetic leaves at float32's lowest rather than at -inf: the
// causally allowed keys plus the real (unpadded) future keys (see the header).
template <typename T>
bool softmax_row(T* row, const unsigned char* visible, int64_t limit, int64_t n_keys) {
    // Accumulate in at least fp32 (T is float or double).
    constexpr T neg_inf = -std::numeric_limits<T>::infinity();
    T mx = neg_inf;
    // Plain selects, not std::max: its by-reference arguments kept the reduction
    // variable in memory and the loop ran scalar (a third of attention's time).
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < limit; ++j) {
        const T v = visible[j] ? row[j] : neg_inf;
        mx = v > mx ? v : mx;
    }
    if (mx == neg_inf) {
        int64_t n = limit;
        for (int64_t j = limit; j < n_keys; ++j) n += visible[j];
        const T u = T(1) / T(n);
        std::fill(row, row + limit, u);
        for (int64_t j = limit; j < n_keys; ++j) row[j] = visible[j] ? u : T(0);
        return false;
    }
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < limit; ++j) {
        // Select after exp: the masked score may be anything, even inf or NaN.
        const T e = vmath::exp(row[j] - mx);
        row[j] = visible[j] ? e : T(0);
        sum += row[j];
    }
    const T inv = T(1) / sum;
#pragma omp simd
    for (int64_t j = 0; j < limit; ++j) row[j] *= inv;
    std::fill(row + limit, row + n_keys, T(0));
    return true;
}

// Softmax backward of one row in place: dS = P (dP - <P, dP>) over the n_keys
// keys, from the probabilities p and dP in `d`. A row that had no visible key
// (uniform, see softmax_row) does not depend on its scores: zero gradient.
template <typename T>
void softmax_row_backward(T* d, const T* p, const unsigned char* visible, int64_t limit,
                          int64_t n_keys) {
    bool any = false;
    for (int64_t j = 0; j < limit && !any; ++j) any = visible[j] != 0;
    if (!any) {
        std::fill(d, d + n_keys, T(0));
        return;
    }
    T dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < n_keys; ++j) dot += p[j] * d[j];
#pragma omp simd
    for (int64_t j = 0; j < n_keys; ++j) d[j] = p[j] * (d[j] - dot);
}

}  // namespace loom::detail
