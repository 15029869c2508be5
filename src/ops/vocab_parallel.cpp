// The CPU's local steps of the vocab-parallel embedding and cross-entropy
// (vocab_parallel.h). The exp sums accumulate in T as ops/softmax_xent.cpp
// does; rows run in order, so every call gives the same bits.
#include "ops/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "ops/vec_math.h"

namespace loom {
namespace {

void check_ids(const int64_t* ids, int64_t N, int64_t V, const char* op) {
    for (int64_t n = 0; n < N; ++n)
        LOOM_CHECK(ids[n] >= 0 && ids[n] < V, "{}: id {} at row {} is outside the table's [0, {})",
                   op, ids[n], n, V);
}

void check_targets(const int64_t* targets, int64_t N, int64_t V, const char* op) {
    for (int64_t n = 0; n < N; ++n) {
        const int64_t t = targets[n];
        LOOM_CHECK(t == k_ignore_index || (t >= 0 && t < V),
                   "{}: target {} at row {} is outside [0, {}) and is not the ignore index {}", op,
                   t, n, V, k_ignore_index);
    }
}

template <typename T>
T exp_sum(const T* x, int64_t valid, T m) {
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < valid; ++i) s += vmath::exp(x[i] - m);
    return s;
}

}  // namespace

int64_t vocab_slice_valid(int64_t V, int64_t first, int64_t count) {
    return std::clamp(V - first, int64_t(0), count);
}

template <typename T>
void vocab_lookup_local(T* out, const int64_t* ids, const T* table_local, int64_t N, int64_t V,
                        int64_t C, int64_t first, int64_t count) {
    check_ids(ids, N, V, "vocab_parallel_embedding_forward");
    for (int64_t n = 0; n < N; ++n) {
        const int64_t local = ids[n] - first;
        T* dst = out + n * C;
        if (local >= 0 && local < count)
            std::copy(table_local + local * C, table_local + (local + 1) * C, dst);
        else
            std::fill(dst, dst + C, T(0));
    }
}

template <typename T>
void vocab_embedding_backward_local(T* dtable_local, const int64_t* ids, const T* dout, int64_t N,
                                    int64_t V, int64_t C, int64_t first, int64_t count,
                                    int64_t padding_idx) {
    check_ids(ids, N, V, "vocab_parallel_embedding_backward");
    // Rows in order, as ops/embedding.cpp sums them: the same result bit for bit.
    for (int64_t n = 0; n < N; ++n) {
        const int64_t local = ids[n] - first;
        if (ids[n] == padding_idx || local < 0 || local >= count) continue;
        T* dst = dtable_local + local * C;
        const T* src = dout + n * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
    }
}

template <typename T>
void vocab_xent_local_max(T* row_max, const T* logits_local, int64_t N, int64_t Vl, int64_t valid) {
    for (int64_t n = 0; n < N; ++n) {
        const T* x = logits_local + n * Vl;
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t i = 0; i < valid; ++i) mx = x[i] > mx ? x[i] : mx;
        row_max[n] = mx;
    }
}

template <typename T>
void vocab_xent_local_sums(T* sums, const T* logits_local, const T* row_max, int64_t N, int64_t Vl,
                           int64_t valid) {
    for (int64_t n = 0; n < N; ++n) sums[n] = exp_sum(logits_local + n * Vl, valid, row_max[n]);
}

template <typename T>
void vocab_xent_local_stats(T* stats, const T* logits_local, const int64_t* targets,
                            const T* row_max, int64_t N, int64_t Vl, int64_t valid, int64_t first,
                            int64_t V) {
    check_targets(targets, N, V, "vocab_parallel_xent_forward");
    vocab_xent_local_sums(stats, logits_local, row_max, N, Vl, valid);
    for (int64_t n = 0; n < N; ++n) {
        const int64_t t = targets[n] - first;
        const bool owner = targets[n] != k_ignore_index && t >= 0 && t < valid;
        stats[N + n] = owner ? logits_local[n * Vl + t] : T(0);
    }
}

template <typename T>
XentSum vocab_xent_loss_sum(T* losses, const T* row_max, const T* stats, const int64_t* targets,
                            int64_t N) {
    XentSum out;
    for (int64_t n = 0; n < N; ++n) {
        T loss = 0;
        if (targets[n] != k_ignore_index) {
            loss = (row_max[n] + std::log(stats[n])) - stats[N + n];
            out.loss_sum += double(loss);
            out.count += 1;
        }
        if (losses != nullptr) losses[n] = loss;
    }
    return out;
}

template <typename T>
void vocab_xent_backward_local(T* dlogits_local, const T* logits_local, const int64_t* targets,
                               const T* row_max, const T* sums, int64_t N, int64_t Vl,
                               int64_t valid, int64_t first, int64_t V, double scale) {
    check_targets(targets, N, V, "vocab_parallel_xent_backward");
    for (int64_t n = 0; n < N; ++n) {
        T* d = dlogits_local + n * Vl;
        if (targets[n] == k_ignore_index) {
            std::fill(d, d + Vl, T(0));
            continue;
        }
        // NOTE: in place (d == x) each element is read before it is written.
        const T* x = logits_local + n * Vl;
        const T mx = row_max[n], f = T(scale) / sums[n];
#pragma omp simd
        for (int64_t i = 0; i < valid; ++i) d[i] = vmath::exp(x[i] - mx) * f;
        std::fill(d + valid, d + Vl, T(0));
        const int64_t t = targets[n] - first;
        if (t >= 0 && t < valid) d[t] -= T(scale);
    }
}

#define LOOM_VOCAB_PARALLEL_INSTANTIATE(T)                                                        \
    template void vocab_lookup_local<T>(T*, const int64_t*, const T*, int64_t, int64_t, int64_t,  \
                                        int64_t, int64_t);                                        \
    template void vocab_embedding_backward_local<T>(T*, const int64_t*, const T*, int64_t,        \
                                                    int64_t, int64_t, int64_t, int64_t, int64_t); \
    template void vocab_xent_local_max<T>(T*, const T*, int64_t, int64_t, int64_t);               \
    template void vocab_xent_local_sums<T>(T*, const T*, const T*, int64_t, int64_t, int64_t);    \
    template void vocab_xent_local_stats<T>(T*, const T*, const int64_t*, const T*, int64_t,      \
                                            int64_t, int64_t, int64_t, int64_t);                  \
    template XentSum vocab_xent_loss_sum<T>(T*, const T*, const T*, const int64_t*, int64_t);     \
    template void vocab_xent_backward_local<T>(T*, const T*, const int64_t*, const T*, const T*,  \
                                               int64_t, int64_t, int64_t, int64_t, int64_t,       \
                                               double)

LOOM_VOCAB_PARALLEL_INSTANTIATE(float);
LOOM_VOCAB_PARALLEL_INSTANTIATE(double);

#undef LOOM_VOCAB_PARALLEL_INSTANTIATE

}  // namespace loom
