// Softmax cross-entropy, forward (sum of row losses) and backward, threaded over rows.
//
// Per row: m = max(x), lse = m + log(sum exp(x - m)), loss = lse - x[target]
// (torch's log_softmax + nll_loss). The exp sum accumulates in T with 16
// partial sums (omp simd), the batch sum of row losses in double and in row
// order, so the result does not depend on the thread count.
#include "ops/softmax_xent.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "ops/vec_math.h"

namespace loom {
namespace {

void check_targets(const int64_t* targets, int64_t N, int64_t V) {
    for (int64_t n = 0; n < N; ++n) {
        const int64_t t = targets[n];
        LOOM_CHECK(t == k_ignore_index || (t >= 0 && t < V),
                   "softmax_xent: target {} at row {} is outside [0, {}) and is not the ignore "
                   "index {}",
                   t, n, V, k_ignore_index);
    }
}

template <typename T>
T row_max(const T* x, int64_t V) {
    T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < V; ++i) m = x[i] > m ? x[i] : m;  // not std::max: see attention.cpp
    return m;
}

// Grain: rows are big (a vocabulary), so parallelise whenever there are two.
bool parallel_rows(int64_t N, int64_t V) { return N > 1 && N * V > (1 << 14) && !omp_in_parallel(); }

}  // namespace

template <typename T>
XentSum softmax_xent_forward(T* losses, const T* logits, const int64_t* targets, int64_t N,
                             int64_t V) {
    check_targets(targets, N, V);
    std::vector<T> local;
    if (losses == nullptr) {
        local.resize(size_t(N));
        losses = local.data();
    }
    // Dynamic: parts are taken as threads come free, so a thread whose core
    // another process holds delays the region less (docs/cpu-contention.md).
#pragma omp parallel for schedule(dynamic, 1) if (parallel_rows(N, V))
    for (int64_t n = 0; n < N; ++n) {
        if (targets[n] == k_ignore_index) {
            losses[n] = T(0);
            continue;
        }
        const T* x = logits + n * V;
        const T m = row_max(x, V);
        T s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < V; ++i) s += vmath::exp(x[i] - m);
        losses[n] = (m + std::log(s)) - x[targets[n]];
    }
    XentSum r;
    for (int64_t n = 0; n < N; ++n) {
        if (targets[n] == k_ignore_index) continue;
        r.loss_sum += double(losses[n]);
        r.count += 1;
    }
    return r;
}

template <typename T>
void softmax_xent_backward(T* dlogits, const T* logits, const int64_t* targets, int64_t N,
                           int64_t V, double scale) {
    check_targets(targets, N, V);
#pragma omp parallel for schedule(dynamic, 1) if (parallel_rows(N, V))
    for (int64_t n = 0; n < N; ++n) {
        T* d = dlogits + n * V;
        if (targets[n] == k_ignore_index) {
            std::fill(d, d + V, T(0));
            continue;
        }
        const T* x = logits + n * V;
        const T m = row_max(x, V);
        T s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < V; ++i) {
            d[i] = vmath::exp(x[i] - m);
            s += d[i];
        }
        const T f = T(scale) / s;
#pragma omp simd
        for (int64_t i = 0; i < V; ++i) d[i] *= f;
        d[targets[n]] -= T(scale);
    }
}

template XentSum softmax_xent_forward<float>(float*, const float*, const int64_t*, int64_t,
                                             int64_t);
template XentSum softmax_xent_forward<double>(double*, const double*, const int64_t*, int64_t,
                                              int64_t);
template void softmax_xent_backward<float>(float*, const float*, const int64_t*, int64_t, int64_t,
                                           double);
template void softmax_xent_backward<double>(double*, const double*, const int64_t*, int64_t,
                                            int64_t, double);

}  // namespace loom
