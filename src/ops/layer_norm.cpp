// Layer normalisation forward/backward over rows of (N, C), threaded over rows.
//
// Statistics are two-pass in T (mean, then the mean of squared deviations), so
// there is no E[x^2] - E[x]^2 cancellation. Row sums run in 16 interleaved
// partial sums, written out rather than left to an `omp simd` reduction: the
// order (and the small rounding error) is then the same whether or not the
// compiler vectorises the loop. Under the sanitizers it did not, and a single
// running fp32 sum of 768 values near 5 put the output 6e-6 off.
// dweight/dbias are reduced through fixed groups of k_group rows and then summed
// group by group in order, so the result does not depend on the thread count.
#include "ops/layer_norm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace loom {
namespace {

constexpr int64_t k_group = 32;  // rows per partial dweight/dbias sum
constexpr int64_t k_cols = 64;   // columns per task in the final reduction

// Two sums over i < C in one pass, term(i, a, b) adding its two terms to a
// and b: lane k of each accumulates i = k, k + 16, ...; the 16 lanes are then
// added pairwise.
constexpr int k_lanes = 16;

template <typename T>
T fold_lanes(T* acc) {
    for (int w = k_lanes / 2; w >= 1; w /= 2)
        for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
    return acc[0];
}

template <typename T, typename F>
std::pair<T, T> lane_sum2(int64_t C, F term) {
    T a[k_lanes] = {}, b[k_lanes] = {};
    int64_t i = 0;
    for (; i + k_lanes <= C; i += k_lanes)
#pragma omp simd
        for (int k = 0; k < k_lanes; ++k) term(i + k, a[k], b[k]);
    for (int k = 0; i < C; ++i, ++k) term(i, a[k], b[k]);
    return {fold_lanes(a), fold_lanes(b)};
}

// One sum of term(i), in the same order.
template <typename T, typename F>
T lane_sum(int64_t C, F term) {
    return lane_sum2<T>(C, [&](int64_t i, T& a, T&) { a += term(i); }).first;
}

}  // namespace

template <typename T>
void layer_norm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                        int64_t N, int64_t C, double eps) {
    // Dynamic: parts are taken as threads come free, so a thread whose core
    // another process holds delays the region less (docs/cpu-contention.md).
#pragma omp parallel for schedule(dynamic, 8) if (N * C > (1 << 14) && !omp_in_parallel())
    for (int64_t n = 0; n < N; ++n) {
        const T* x = inp + n * C;
        const T m = lane_sum<T>(C, [x](int64_t i) { return x[i]; }) / T(C);
        const T v = lane_sum<T>(C, [x, m](int64_t i) { return (x[i] - m) * (x[i] - m); });
        const T s = T(1) / std::sqrt(v / T(C) + T(eps));
        T* o = out + n * C;
#pragma omp simd
        for (int64_t i = 0; i < C; ++i) o[i] = (x[i] - m) * s * weight[i] + bias[i];
        mean[n] = m;
        rstd[n] = s;
    }
}

template <typename T>
void layer_norm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                         const T* weight, const T* mean, const T* rstd, int64_t N, int64_t C,
                         bool accumulate_dinp) {
    const int64_t n_groups = (N + k_group - 1) / k_group;
    // (n_groups, 2, C): per group, the dweight then the dbias partial sums. Kept
    // per calling thread and reused: fresh pages cost more than this kernel.
    // NOTE: OpenMP workers must use `part`: inside the region the name `partial`
    // would denote each worker's own (empty) thread_local vector.
    thread_local std::vector<T> partial;
    if (partial.size() < size_t(n_groups * 2 * C)) partial.resize(size_t(n_groups * 2 * C));
    T* const part = partial.data();
    const bool par = N * C > (1 << 14) && !omp_in_parallel();
#pragma omp parallel if (par)
    {
#pragma omp for schedule(dynamic, 1)
        for (int64_t g = 0; g < n_groups; ++g) {
            T* pw = part + g * 2 * C;
            T* pb = pw + C;
            std::fill(pw, pw + 2 * C, T(0));
            for (int64_t n = g * k_group; n < std::min(N, (g + 1) * k_group); ++n) {
                const T* x = inp + n * C;
                const T* dy = dout + n * C;
                const T m = mean[n], s = rstd[n];
                // mean(dnorm) and mean(dnorm * norm), dnorm = weight * dout
                const auto [sum_a, sum_b] = lane_sum2<T>(C, [&](int64_t i, T& sa, T& sb) {
                    const T dn = weight[i] * dy[i];
                    sa += dn;
                    sb += dn * (x[i] - m) * s;
                });
                const T a = sum_a / T(C), b = sum_b / T(C);
                T* dx = dinp + n * C;
                if (accumulate_dinp) {
#pragma omp simd
                    for (int64_t i = 0; i < C; ++i) {
                        const T norm = (x[i] - m) * s;
                        dx[i] += (weight[i] * dy[i] - a - norm * b) * s;
                        pw[i] += norm * dy[i];
                        pb[i] += dy[i];
                    }
                } else {
#pragma omp simd
                    for (int64_t i = 0; i < C; ++i) {
                        const T norm = (x[i] - m) * s;
                        dx[i] = (weight[i] * dy[i] - a - norm * b) * s;
                        pw[i] += norm * dy[i];
                        pb[i] += dy[i];
                    }
                }
            }
        }
        // Groups summed in order for each column: deterministic for any thread count.
#pragma omp for schedule(dynamic, 1)
        for (int64_t c0 = 0; c0 < C; c0 += k_cols) {
            const int64_t len = std::min(k_cols, C - c0);
            T sw[k_cols] = {}, sb[k_cols] = {};
            for (int64_t g = 0; g < n_groups; ++g) {
                const T* pw = part + g * 2 * C + c0;
                const T* pb = pw + C;
#pragma omp simd
                for (int64_t i = 0; i < len; ++i) {
                    sw[i] += pw[i];
                    sb[i] += pb[i];
                }
            }
            // Null: a frozen weight or bias (LoRA's base).
            if (dweight != nullptr)
                for (int64_t i = 0; i < len; ++i) dweight[c0 + i] += sw[i];
            if (dbias != nullptr)
                for (int64_t i = 0; i < len; ++i) dbias[c0 + i] += sb[i];
        }
    }
}

template void layer_norm_forward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, int64_t, int64_t, double);
template void layer_norm_forward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, int64_t, int64_t, double);
template void layer_norm_backward<float>(float*, float*, float*, const float*, const float*,
                                         const float*, const float*, const float*, int64_t, int64_t,
                                         bool);
template void layer_norm_backward<double>(double*, double*, double*, const double*, const double*,
                                          const double*, const double*, const double*, int64_t,
                                          int64_t, bool);

}  // namespace loom
