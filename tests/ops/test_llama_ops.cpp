// The Llama-family kernels (ops/rms_norm.h, rope.h, repeat_kv.h, swiglu.h)
// against fp64 references written from transformers 4.40's definitions (the
// fixture README's "Decoder families"), and their backwards against central
// differences of those references; the CPU table's entries against the ops.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <vector>

#include "ops/attention.h"
#include "ops/device_ops.h"
#include "ops/repeat_kv.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "ops_test_util.h"

namespace loom::test {
namespace {

// ---- fp64 references -----------------------------------------------------------

std::vector<double> rms_ref(const std::vector<double>& x, const std::vector<double>& w, int64_t N,
                            int64_t C, double eps) {
    std::vector<double> y(x.size());
    for (int64_t n = 0; n < N; ++n) {
        double ms = 0;
        for (int64_t i = 0; i < C; ++i) ms += x[size_t(n * C + i)] * x[size_t(n * C + i)];
        const double r = 1.0 / std::sqrt(ms / double(C) + eps);
        for (int64_t i = 0; i < C; ++i)
            y[size_t(n * C + i)] = w[size_t(i)] * x[size_t(n * C + i)] * r;
    }
    return y;
}

// RoPE as a complex turn of the pair (x[i], x[i + d/2]) by p * theta^(-2i/d) / scale.
std::vector<double> rope_ref(const std::vector<double>& x, int64_t ld, int64_t B, int64_t T,
                             int64_t heads, int64_t d, double theta, double scale) {
    std::vector<double> y = x;
    const int64_t h = d / 2;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
            for (int64_t k = 0; k < heads; ++k)
                for (int64_t i = 0; i < h; ++i) {
                    const size_t lo = size_t((b * T + t) * ld + k * d + i), hi = lo + size_t(h);
                    const double a =
                        (double(t) / scale) * std::pow(theta, -2.0 * double(i) / double(d));
                    const std::complex<double> z =
                        std::complex<double>(x[lo], x[hi]) * std::polar(1.0, a);
                    y[lo] = z.real();
                    y[hi] = z.imag();
                }
    return y;
}

std::vector<double> swiglu_ref(const std::vector<double>& gu, int64_t N, int64_t I) {
    std::vector<double> y(static_cast<size_t>(N * I));
    for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < I; ++i) {
            const double g = gu[size_t(n * 2 * I + i)], u = gu[size_t(n * 2 * I + I + i)];
            y[size_t(n * I + i)] = g / (1.0 + std::exp(-g)) * u;
        }
    return y;
}

// ---- RMSNorm ---------------------------------------------------------------------

TEST(RmsNorm, ForwardIsHfsFormula) {
    const int64_t N = 7, C = 24;
    const auto x = round_f32(randn(N * C, 1, 2.0));
    const auto w = round_f32(randn(C, 2, 1.0));
    std::vector<float> y(static_cast<size_t>(N * C)), rstd(static_cast<size_t>(N));
    const auto xf = to_f32(x), wf = to_f32(w);
    rms_norm_forward(y.data(), rstd.data(), xf.data(), wf.data(), N, C, 1e-5);
    EXPECT_TRUE(all_close("rms y", y, rms_ref(x, w, N, C, 1e-5), tol::f32_fwd));
    // No mean is subtracted: a constant row keeps its sign.
    std::vector<float> ones(static_cast<size_t>(C), 3.0f), wone(static_cast<size_t>(C), 1.0f),
        y1(static_cast<size_t>(C)), r1(1);
    rms_norm_forward(y1.data(), r1.data(), ones.data(), wone.data(), 1, C, 0.0);
    EXPECT_NEAR(y1[0], 1.0f, 1e-6);
}

TEST(RmsNorm, BackwardMatchesCentralDifferences) {
    const int64_t N = 5, C = 16;
    auto x = round_f32(randn(N * C, 3, 1.5));
    auto w = round_f32(randn(C, 4, 1.0));
    const auto wy = randn(N * C, 5);
    const double eps = 1e-5;
    auto loss = [&] { return dot(wy, rms_ref(x, w, N, C, eps).data()); };
    const auto dx_ref = numeric_grad(loss, x.data(), N * C);
    const auto dw_ref = numeric_grad(loss, w.data(), C);

    const auto xf = to_f32(x), wf = to_f32(w), dyf = to_f32(wy);
    std::vector<float> y(static_cast<size_t>(N * C)), rstd(static_cast<size_t>(N)),
        dx(static_cast<size_t>(N * C), 0.5f);
    std::vector<float> dw(static_cast<size_t>(C), 0.25f);  // accumulates onto what is there
    rms_norm_forward(y.data(), rstd.data(), xf.data(), wf.data(), N, C, eps);
    rms_norm_backward(dx.data(), dw.data(), dyf.data(), xf.data(), wf.data(), rstd.data(), N, C);
    EXPECT_TRUE(all_close("rms dx", dx, dx_ref, tol::f32_bwd));
    std::vector<double> dw_want(dw_ref);
    for (double& v : dw_want) v += 0.25;
    EXPECT_TRUE(all_close("rms dw", dw, dw_want, tol::f32_bwd));
    // accumulate_dinp adds onto the residual's gradient.
    std::vector<float> dx2(static_cast<size_t>(N * C), 1.0f), dw2(static_cast<size_t>(C), 0.0f);
    rms_norm_backward(dx2.data(), dw2.data(), dyf.data(), xf.data(), wf.data(), rstd.data(), N, C,
                      true);
    for (int64_t i = 0; i < N * C; ++i) ASSERT_NEAR(dx2[size_t(i)], dx[size_t(i)] + 1.0f, 1e-6);
}

// ---- rotary embeddings -------------------------------------------------------------

TEST(Rope, ForwardTurnsHalfPairsAsHf) {
    const int64_t B = 2, T = 9, heads = 3, d = 8, ld = heads * d + 5;  // a row stride with a gap
    const auto x = round_f32(randn(B * T * ld, 6));
    for (double theta : {10000.0, 500000.0})
        for (double scale : {1.0, 2.0}) {
            std::vector<float> y = to_f32(x);
            rope_apply(y.data(), ld, B, T, heads, d, RopeSpec{theta, scale}, false);
            const auto want = rope_ref(x, ld, B, T, heads, d, theta, scale);
            EXPECT_TRUE(all_close("rope", y, want, Tol{2e-6, 2e-6}))
                << "theta " << theta << " scale " << scale;
            // The gap after the heads is left alone.
            for (int64_t r = 0; r < B * T; ++r)
                for (int64_t c = heads * d; c < ld; ++c)
                    ASSERT_EQ(y[size_t(r * ld + c)], float(x[size_t(r * ld + c)]));
        }
}

TEST(Rope, PairsIWithIPlusHalfNotTheNeighbour) {
    // Position 1, one head of 4: dims (0, 2) and (1, 3) turn together.
    std::vector<float> x = {0, 0, 0, 0, 1, 0, 0, 0};  // (T = 2, d = 4), row 1 = e0
    rope_apply(x.data(), 4, 1, 2, 1, 4, RopeSpec{10000.0, 1.0}, false);
    EXPECT_NEAR(x[4], std::cos(1.0), 1e-6);
    EXPECT_NEAR(x[6], std::sin(1.0), 1e-6);  // i + d/2, not i + 1
    EXPECT_EQ(x[5], 0.0f);
    EXPECT_EQ(x[7], 0.0f);
}

TEST(Rope, InverseIsTheAdjointAndUndoesTheTurn) {
    const int64_t B = 2, T = 7, heads = 2, d = 6, ld = heads * d;
    const auto x = round_f32(randn(B * T * ld, 7)), g = round_f32(randn(B * T * ld, 8));
    const RopeSpec s{500000.0, 1.0};
    std::vector<float> rx = to_f32(x), rg = to_f32(g);
    rope_apply(rx.data(), ld, B, T, heads, d, s, false);
    rope_apply(rg.data(), ld, B, T, heads, d, s, true);
    double a = 0, b = 0;  // <R x, g> = <x, R^-1 g>: the inverse is the backward
    for (size_t i = 0; i < x.size(); ++i) {
        a += double(rx[i]) * g[i];
        b += x[i] * double(rg[i]);
    }
    EXPECT_NEAR(a, b, 1e-4);
    rope_apply(rx.data(), ld, B, T, heads, d, s, true);
    EXPECT_TRUE(all_close("rope round trip", rx, x, Tol{1e-5, 1e-5}));
}

TEST(Rope, LinearScalingDividesThePosition) {
    const int64_t T = 12, d = 16, h = d / 2;
    std::vector<float> c1(static_cast<size_t>(T * h)), s1(static_cast<size_t>(T * h)),
        c2(static_cast<size_t>(T * h)), s2(static_cast<size_t>(T * h));
    rope_tables(c1.data(), s1.data(), T, d, RopeSpec{10000.0, 1.0});
    rope_tables(c2.data(), s2.data(), T, d, RopeSpec{10000.0, 2.0});
    for (int64_t t = 0; 2 * t < T; ++t)
        for (int64_t i = 0; i < h; ++i) {
            EXPECT_EQ(c2[size_t(2 * t * h + i)], c1[size_t(t * h + i)]);
            EXPECT_EQ(s2[size_t(2 * t * h + i)], s1[size_t(t * h + i)]);
        }
    EXPECT_NE(c2[size_t(1 * h)], c1[size_t(1 * h)]);
}

// Dynamic NTK (4.40's LlamaDynamicNTKScalingRotaryEmbedding): past
// max_position_embeddings the base grows to theta * (f T / max - (f - 1)) ^
// (d / (d - 2)); positions are not divided. Up to max the turn is rope's own.
TEST(Rope, DynamicNtkScalingRaisesTheBaseOnlyPastMaxPositions) {
    const int64_t B = 2, heads = 2, d = 8, ld = heads * d, max_pos = 8;
    const double theta = 10000.0, f = 2.0;
    const RopeSpec dyn{theta, 1.0, f, max_pos};
    for (int64_t T : {int64_t(6), int64_t(8), int64_t(13)}) {
        const auto x = round_f32(randn(B * T * ld, 40 + uint64_t(T)));
        std::vector<float> y = to_f32(x);
        rope_apply(y.data(), ld, B, T, heads, d, dyn, false);
        const double base = T > max_pos
                                ? theta * std::pow(f * double(T) / double(max_pos) - (f - 1.0),
                                                   double(d) / double(d - 2))
                                : theta;
        EXPECT_TRUE(all_close("dynamic rope", y, rope_ref(x, ld, B, T, heads, d, base, 1.0),
                              Tol{2e-6, 2e-6}))
            << "T " << T;
        std::vector<float> plain = to_f32(x);
        rope_apply(plain.data(), ld, B, T, heads, d, RopeSpec{theta, 1.0}, false);
        if (T <= max_pos)
            EXPECT_EQ(y, plain) << "T " << T;
        else
            EXPECT_NE(y, plain) << "T " << T;
    }
    // 13 positions over 8 with factor 2: (2 * 13 / 8 - 1) ^ (8 / 6) = 2.25 ^ (4/3).
    EXPECT_NEAR(dyn.base(13, d) / theta, std::pow(2.25, 4.0 / 3.0), 1e-6);
    EXPECT_EQ(dyn.base(8, d), float(theta));
}

// ---- grouped-query expansion -----------------------------------------------------------

TEST(RepeatKv, QueryHeadReadsKvHeadHOverGroup) {
    const int64_t N = 3, NH = 6, NKV = 2, d = 4, C = NH * d, KV = NKV * d;
    const auto p = round_f32(randn(N * (C + 2 * KV), 9));
    const auto pf = to_f32(p);
    std::vector<float> e(static_cast<size_t>(N * 3 * C));
    repeat_kv_forward(e.data(), pf.data(), N, NH, NKV, d);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t h = 0; h < NH; ++h)
            for (int64_t i = 0; i < d; ++i) {
                const float* er = e.data() + n * 3 * C;
                const float* pr = pf.data() + n * (C + 2 * KV);
                const int64_t kv = h / (NH / NKV);  // 0,0,0,1,1,1
                ASSERT_EQ(er[h * d + i], pr[h * d + i]);
                ASSERT_EQ(er[C + h * d + i], pr[C + kv * d + i]);
                ASSERT_EQ(er[2 * C + h * d + i], pr[C + KV + kv * d + i]);
            }
}

TEST(RepeatKv, BackwardSumsEachGroup) {
    const int64_t N = 4, NH = 4, NKV = 2, d = 3, C = NH * d, KV = NKV * d;
    const auto p = round_f32(randn(N * (C + 2 * KV), 10)), g = round_f32(randn(N * 3 * C, 11));
    const auto pf = to_f32(p), gf = to_f32(g);
    std::vector<float> e(static_cast<size_t>(N * 3 * C)),
        dp(static_cast<size_t>(N * (C + 2 * KV)), 7.0f);
    repeat_kv_forward(e.data(), pf.data(), N, NH, NKV, d);
    repeat_kv_backward(dp.data(), gf.data(), N, NH, NKV, d);
    double a = 0, b = 0;  // <E p, g> = <p, E^T g>
    for (size_t i = 0; i < e.size(); ++i) a += double(e[i]) * g[i];
    for (size_t i = 0; i < dp.size(); ++i) b += p[i] * double(dp[i]);
    EXPECT_NEAR(a, b, 1e-4);
    // k of kv head 1 = the sum of expanded heads 2 and 3.
    EXPECT_FLOAT_EQ(dp[size_t(C + d)], gf[size_t(C + 2 * d)] + gf[size_t(C + 3 * d)]);
}

// ---- SwiGLU ------------------------------------------------------------------------------

TEST(Swiglu, ForwardAndBackwardMatchTheReference) {
    const int64_t N = 5, I = 11;
    auto gu = round_f32(randn(N * 2 * I, 12, 2.0));
    const auto wy = randn(N * I, 13);
    const auto guf = to_f32(gu), dyf = to_f32(wy);
    std::vector<float> y(static_cast<size_t>(N * I)), dgu(static_cast<size_t>(N * 2 * I), 9.0f);
    swiglu_forward(y.data(), guf.data(), N, I);
    EXPECT_TRUE(all_close("swiglu y", y, swiglu_ref(gu, N, I), tol::f32_fwd));
    swiglu_backward(dgu.data(), guf.data(), dyf.data(), N, I);
    auto loss = [&] { return dot(wy, swiglu_ref(gu, N, I).data()); };
    EXPECT_TRUE(
        all_close("swiglu dgu", dgu, numeric_grad(loss, gu.data(), N * 2 * I), tol::f32_bwd));
}

// ---- Mistral's sliding window ---------------------------------------------------------

// Query i attends to keys i - w .. i (w + 1 keys with itself): every other
// probability is exactly 0, each row sums to 1, and a window of T or more is
// no window at all.
TEST(SlidingWindow, KeysIMinusWThroughI) {
    const int64_t B = 2, T = 9, NH = 2, HS = 4, C = NH * HS, w = 3;
    const auto q = to_f32(randn(B * T * C, 20)), k = to_f32(randn(B * T * C, 21)),
               v = to_f32(randn(B * T * C, 22));
    const std::vector<int64_t> pad = {1, 1, 1, 1, 1, 1, 1, 1, 1, /**/ 1, 1, 1, 1, 1, 1, 1, 0, 0};
    std::vector<float> y(static_cast<size_t>(B * T * C)), att(static_cast<size_t>(B * NH * T * T));
    const AttnShape s{B, T, NH, HS};
    attention_forward<float>(y.data(), att.data(), q.data(), k.data(), v.data(), C, s,
                             AttnMask{pad.data(), true, w}, DropoutSpec{});
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < NH; ++h)
            for (int64_t i = 0; i < T; ++i) {
                const float* row = att.data() + ((b * NH + h) * T + i) * T;
                double sum = 0;
                for (int64_t j = 0; j < T; ++j) {
                    const bool seen = j <= i && i - j <= w && pad[size_t(b * T + j)] != 0;
                    if (seen) {
                        ASSERT_GT(row[j], 0.0f);
                    } else {
                        ASSERT_EQ(row[j], 0.0f) << b << " " << h << " " << i << " " << j;
                    }
                    sum += row[j];
                }
                ASSERT_NEAR(sum, 1.0, 1e-6);
            }
    std::vector<float> y_wide(y.size()), y_none(y.size());
    attention_forward<float>(y_wide.data(), att.data(), q.data(), k.data(), v.data(), C, s,
                             AttnMask{pad.data(), true, T}, DropoutSpec{});
    attention_forward<float>(y_none.data(), att.data(), q.data(), k.data(), v.data(), C, s,
                             AttnMask{pad.data(), true, -1}, DropoutSpec{});
    EXPECT_EQ(y_wide, y_none);
    EXPECT_NE(y, y_none);
}

// ---- the CPU table -------------------------------------------------------------------------

TEST(LlamaNnOps, CpuTableEntriesAreTheOps) {
    const NnOps& ops = *cpu_backend().ops().nn;
    ASSERT_TRUE(ops.decoder_supported());
    const OpCtx ctx{&cpu_backend(), DType::f32};
    const int64_t B = 2, T = 5, NH = 4, NKV = 2, d = 4, C = NH * d, N = B * T;
    const auto x = to_f32(round_f32(randn(N * C, 15))), w = to_f32(round_f32(randn(C, 16)));
    std::vector<float> y1(static_cast<size_t>(N * C)), y2(static_cast<size_t>(N * C)),
        r1(static_cast<size_t>(N)), r2(static_cast<size_t>(N));
    ops.rms_norm_forward(ctx, y1.data(), r1.data(), x.data(), w.data(), N, C, 1e-6);
    rms_norm_forward(y2.data(), r2.data(), x.data(), w.data(), N, C, 1e-6);
    EXPECT_EQ(y1, y2);
    std::vector<float> q1 = x, q2 = x;
    ops.rope(ctx, q1.data(), C, B, T, NH, d, RopeSpec{1e4, 1.0}, false, nullptr);
    rope_apply(q2.data(), C, B, T, NH, d, RopeSpec{1e4, 1.0}, false);
    EXPECT_EQ(q1, q2);
    const auto packed = to_f32(round_f32(randn(N * (C + 2 * NKV * d), 17)));
    std::vector<float> e1(static_cast<size_t>(N * 3 * C)), e2(static_cast<size_t>(N * 3 * C));
    ops.repeat_kv_forward(ctx, e1.data(), packed.data(), N, NH, NKV, d);
    repeat_kv_forward(e2.data(), packed.data(), N, NH, NKV, d);
    EXPECT_EQ(e1, e2);
    std::vector<float> s1(static_cast<size_t>(N * C / 2)), s2(static_cast<size_t>(N * C / 2));
    ops.swiglu_forward(ctx, s1.data(), DType::f32, x.data(), N, C / 2);
    swiglu_forward(s2.data(), x.data(), N, C / 2);
    EXPECT_EQ(s1, s2);
}

}  // namespace
}  // namespace loom::test
