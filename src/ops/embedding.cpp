// Embedding lookup and its deterministic backward.
//
// Backward is parallel over column blocks: each thread owns a block of columns
// of dtable and walks the ids in row order, so every element's sum runs in the
// same order whatever the thread count (no atomics, no per-thread tables).
#include "ops/embedding.h"

#include <omp.h>

#include <algorithm>

#include "core/check.h"

namespace loom {
namespace {

constexpr int64_t k_cols = 64;  // columns per backward task (whole cache lines)

void check_ids(const int64_t* ids, int64_t N, int64_t V) {
    for (int64_t n = 0; n < N; ++n)
        LOOM_CHECK(ids[n] >= 0 && ids[n] < V,
                   "embedding: id {} at row {} is outside the table's [0, {})", ids[n], n, V);
}

}  // namespace

template <typename T>
void embedding_forward(T* out, const int64_t* ids, const T* table, int64_t N, int64_t V,
                       int64_t C, bool accumulate) {
    check_ids(ids, N, V);
#pragma omp parallel for schedule(dynamic, 16) if (N * C > (1 << 15) && !omp_in_parallel())
    for (int64_t n = 0; n < N; ++n) {
        const T* src = table + ids[n] * C;
        T* dst = out + n * C;
        if (accumulate) {
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
        } else {
            std::copy(src, src + C, dst);
        }
    }
}

template <typename T>
void embedding_backward(T* dtable, const int64_t* ids, const T* dout, int64_t N, int64_t V,
                        int64_t C, int64_t padding_idx) {
    check_ids(ids, N, V);
#pragma omp parallel for schedule(dynamic, 1) if (N * C > (1 << 15) && !omp_in_parallel())
    for (int64_t c0 = 0; c0 < C; c0 += k_cols) {
        const int64_t len = std::min(k_cols, C - c0);
        for (int64_t n = 0; n < N; ++n) {
            if (ids[n] == padding_idx) continue;
            T* dst = dtable + ids[n] * C + c0;
            const T* src = dout + n * C + c0;
#pragma omp simd
            for (int64_t c = 0; c < len; ++c) dst[c] += src[c];
        }
    }
}

template void embedding_forward<float>(float*, const int64_t*, const float*, int64_t, int64_t,
                                       int64_t, bool);
template void embedding_forward<double>(double*, const int64_t*, const double*, int64_t, int64_t,
                                        int64_t, bool);
template void embedding_backward<float>(float*, const int64_t*, const float*, int64_t, int64_t,
                                        int64_t, int64_t);
template void embedding_backward<double>(double*, const int64_t*, const double*, int64_t, int64_t,
                                         int64_t, int64_t);

}  // namespace loom
