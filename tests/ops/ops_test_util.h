// Shared helpers for the CPU op tests: random inputs, the tolerance table,
// tensor comparison with llm.c-style failure reports, central differences.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace loom::test {

// ---- tolerances, one table ----------------------------------------------------
// Pass when |got - want| <= abs + rel * |want| for every element.
struct Tol {
    double abs, rel;
};

namespace tol {
// fp64 analytic gradient vs central differences (eps = 1e-6): truncation error
// ~eps^2 and cancellation ~1e-16 / eps leave ~1e-9 of slack.
inline constexpr Tol fd{1e-7, 1e-6};
// fp32 kernel vs the same kernel in fp64, forward outputs (a few ulp of float
// after a reduction of up to a few thousand terms).
inline constexpr Tol f32_fwd{2e-6, 2e-5};
// fp32 vs fp64 gradients: one more reduction (dweight sums over N rows).
inline constexpr Tol f32_bwd{1e-5, 1e-4};
// fp32 GEMM vs fp64 reference on O(1) inputs with K up to a few hundred.
inline constexpr Tol gemm_f32{1e-4, 1e-5};
// bf16 operands (exact in fp32), fp32 accumulation vs fp64 of the same operands.
inline constexpr Tol gemm_bf16{1e-4, 1e-5};
// Float approximations of exp/erf/tanh against libm in double (pointwise).
inline constexpr Tol vec_math{1e-7, 3e-7};
}  // namespace tol

// ---- comparisons --------------------------------------------------------------
// Compares element by element; on failure reports the max abs and rel diff and
// the first index out of tolerance with both values.
template <typename A, typename B>
::testing::AssertionResult all_close(const std::string& what, const A* got, const B* want,
                                     int64_t n, Tol t) {
    double max_abs = 0, max_rel = 0;
    int64_t first_bad = -1;
    for (int64_t i = 0; i < n; ++i) {
        const double g = double(got[i]), w = double(want[i]);
        const double d = std::fabs(g - w);
        const bool bad = !(d <= t.abs + t.rel * std::fabs(w));  // NaN is bad
        max_abs = std::max(max_abs, d);
        if (w != 0) max_rel = std::max(max_rel, d / std::fabs(w));
        if (bad && first_bad < 0) first_bad = i;
        if (std::isnan(g) != std::isnan(w)) max_abs = INFINITY;
    }
    if (first_bad < 0) return ::testing::AssertionSuccess();
    std::ostringstream os;
    os.precision(10);
    os << what << ": " << n << " elements, max abs diff " << max_abs << ", max rel diff "
       << max_rel << " (tol abs " << t.abs << " rel " << t.rel << "); first mismatch at index "
       << first_bad << ": got " << double(got[first_bad]) << ", want "
       << double(want[first_bad]);
    return ::testing::AssertionFailure() << os.str();
}

template <typename A, typename B>
::testing::AssertionResult all_close(const std::string& what, const std::vector<A>& got,
                                     const std::vector<B>& want, Tol t) {
    if (got.size() != want.size())
        return ::testing::AssertionFailure()
               << what << ": size " << got.size() << " vs " << want.size();
    return all_close(what, got.data(), want.data(), int64_t(got.size()), t);
}

// ---- random inputs ------------------------------------------------------------
inline std::vector<double> randn(int64_t n, uint64_t seed, double scale = 1.0) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> d(0.0, scale);
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = d(rng);
    return v;
}

inline std::vector<double> uniform(int64_t n, uint64_t seed, double lo, double hi) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> d(lo, hi);
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = d(rng);
    return v;
}

// Values representable in fp32, as double: float and double kernels then see
// exactly the same inputs and only their own rounding differs.
inline std::vector<double> round_f32(std::vector<double> v) {
    for (double& x : v) x = double(float(x));
    return v;
}

inline std::vector<float> to_f32(const std::vector<double>& v) {
    return std::vector<float>(v.begin(), v.end());
}

// ---- finite differences -------------------------------------------------------
// Central differences of the scalar `loss` with respect to every element of x
// (perturbed in place and restored).
inline std::vector<double> numeric_grad(const std::function<double()>& loss, double* x, int64_t n,
                                        double eps = 1e-6) {
    std::vector<double> g(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        const double keep = x[i];
        x[i] = keep + eps;
        const double up = loss();
        x[i] = keep - eps;
        const double down = loss();
        x[i] = keep;
        g[size_t(i)] = (up - down) / (2 * eps);
    }
    return g;
}

// sum_i w[i] * y[i]: projects an output on fixed random weights, so d loss / d y = w.
inline double dot(const std::vector<double>& w, const double* y) {
    double s = 0;
    for (size_t i = 0; i < w.size(); ++i) s += w[i] * y[i];
    return s;
}

}  // namespace loom::test
