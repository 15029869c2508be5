// Residual add and in-place helpers: memory-bound loops, threaded when large.
#include "ops/elementwise.h"

#include <omp.h>

namespace loom {
namespace {

// Below this many elements a parallel region costs more than the loop.
constexpr int64_t k_par_grain = 1 << 16;

bool parallel_for(int64_t n) { return n > k_par_grain && !omp_in_parallel(); }

}  // namespace

template <typename T>
void residual_forward(T* out, const T* a, const T* b, int64_t n) {
    // Dynamic: parts are taken as threads come free, so a thread whose core
    // another process holds delays the region less (docs/cpu-contention.md).
#pragma omp parallel for simd schedule(dynamic, 8192) if (parallel : parallel_for(n))
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void add_inplace(T* y, const T* x, int64_t n) {
#pragma omp parallel for simd schedule(dynamic, 8192) if (parallel : parallel_for(n))
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

template <typename T>
void scale_inplace(T* y, T s, int64_t n) {
#pragma omp parallel for simd schedule(dynamic, 8192) if (parallel : parallel_for(n))
    for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

template void residual_forward<float>(float*, const float*, const float*, int64_t);
template void residual_forward<double>(double*, const double*, const double*, int64_t);
template void add_inplace<float>(float*, const float*, int64_t);
template void add_inplace<double>(double*, const double*, int64_t);
template void scale_inplace<float>(float*, float, int64_t);
template void scale_inplace<double>(double*, double, int64_t);

}  // namespace loom
