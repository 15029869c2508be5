// Branch-free float exp, erf and tanh that GCC vectorises inside `omp simd` loops.
//
// glibc's vector math (libmvec) is only used under -ffast-math, which we do not
// build with, so a loop calling std::exp or std::erf runs one element at a time.
// These keep every step plain arithmetic (selects instead of branches) so a loop
// of them becomes AVX-512 code. Accuracy against fp64, measured over all floats
// in range by tests/ops/test_vec_math.cpp: exp <= 2 ulp, erf <= 1 ulp, tanh <= 2 ulp.
// The double overloads call libm: double is the reference path, not a fast one.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

// Force inlining: a call left in a loop body stops vectorisation.
#define LOOM_VINLINE [[gnu::always_inline]] inline
#define LOOM_VINLINE_LAMBDA __attribute__((always_inline))

namespace loom::vmath {

// e^x. Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, degree-7 Taylor for
// e^r, then 2^n by building the exponent bits. Inputs are clamped to
// [-87.3, 88]: results stay normal floats (never inf), which every caller
// (softmax, erf, sigmoid) tolerates.
LOOM_VINLINE float exp(float x) {
    x = x > 88.0f ? 88.0f : x;
    x = x < -87.3f ? -87.3f : x;
    // Round to nearest through the 1.5 * 2^23 trick (exact for |v| < 2^22).
    const float shifter = 12582912.0f;
    const float n = (x * 1.44269504088896341f + shifter) - shifter;
    float r = std::fma(n, -0.693145751953125f, x);  // ln2 split: hi part exact in n*hi
    r = std::fma(n, -1.428606765330187045e-06f, r);
    float p = 1.0f / 5040.0f;
    p = std::fma(p, r, 1.0f / 720.0f);
    p = std::fma(p, r, 1.0f / 120.0f);
    p = std::fma(p, r, 1.0f / 24.0f);
    p = std::fma(p, r, 1.0f / 6.0f);
    p = std::fma(p, r, 0.5f);
    p = std::fma(p, r, 1.0f);
    p = std::fma(p, r, 1.0f);
    const int32_t bits = (int32_t(n) + 127) << 23;
    return p * std::bit_cast<float>(bits);
}

// erf(x): two minimax polynomials split at |x| = 0.927734375; past it erf is
// written as 1 - exp(poly(|x|)). Max error 1 ulp over all floats.
LOOM_VINLINE float erf(float a) {
    const float t = std::fabs(a);
    const float s = a * a;
    float r = std::fma(-1.72853470e-5f, t, 3.83197126e-4f);
    const float u = std::fma(-3.88396438e-3f, t, 2.42546219e-2f);
    r = std::fma(r, s, u);
    r = std::fma(r, t, -1.06777877e-1f);
    r = std::fma(r, t, -6.34846687e-1f);
    r = std::fma(r, t, -1.28717512e-1f);
    r = std::fma(r, t, -t);
    const float big = std::copysign(1.0f - exp(r), a);
    float q = -5.96761703e-4f;
    q = std::fma(q, s, 4.99119423e-3f);
    q = std::fma(q, s, -2.67681349e-2f);
    q = std::fma(q, s, 1.12819925e-1f);
    q = std::fma(q, s, -3.76125336e-1f);
    q = std::fma(q, s, 1.28379166e-1f);
    const float small = std::fma(q, a, a);
    return t > 0.927734375f ? big : small;
}

// tanh(x): odd Taylor polynomial (to x^17) near 0, where 1 - 2/(e^2x + 1) would
// cancel, and the exp form elsewhere.
LOOM_VINLINE float tanh(float x) {
    const float t = std::fabs(x);
    const float e = exp(2.0f * t);
    const float far = std::copysign(1.0f - 2.0f / (e + 1.0f), x);
    const float s = x * x;
    float p = 0.000590027440945586f;  // x^17 coefficient, 6404582 / 10854718875
    p = std::fma(p, s, -0.001455834387051318f);
    p = std::fma(p, s, 0.003592128036572481f);
    p = std::fma(p, s, -0.008863235529902197f);
    p = std::fma(p, s, 0.021869488536155203f);
    p = std::fma(p, s, -0.05396825396825397f);
    p = std::fma(p, s, 0.13333333333333333f);
    p = std::fma(p, s, -0.3333333333333333f);
    const float near = std::fma(p * s, x, x);
    return t < 0.55f ? near : far;
}

// Logistic sigmoid 1 / (1 + e^-x); exact enough at both tails (no cancellation).
LOOM_VINLINE float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

inline double exp(double x) { return std::exp(x); }
inline double erf(double x) { return std::erf(x); }
inline double tanh(double x) { return std::tanh(x); }
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace loom::vmath
