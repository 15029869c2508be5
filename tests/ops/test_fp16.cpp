// fp16 rounding and the fp16 linear layer (ops/matmul.h): IEEE binary16 values
// (round to nearest even, inf past 65504, subnormals down to 2^-24), and the
// layer's overflow, accuracy and accumulation rules.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ops/matmul.h"

namespace loom {
namespace {

float r16(float x) {
    float y = 0;
    round_to_fp16(&y, &x, 1);
    return y;
}

TEST(Fp16, RoundsToBinary16Values) {
    EXPECT_EQ(r16(1.0f), 1.0f);
    EXPECT_EQ(r16(1.0f / 3.0f), 0.333251953125f);  // 0x3555
    EXPECT_EQ(r16(65504.0f), 65504.0f);            // the largest finite half
    EXPECT_EQ(r16(65519.0f), 65504.0f);
    EXPECT_TRUE(std::isinf(r16(65520.0f)));  // the tie rounds to even: 65536, past the range
    EXPECT_TRUE(std::isinf(r16(-1e6f)) && r16(-1e6f) < 0);
    EXPECT_EQ(r16(std::ldexp(1.0f, -24)), std::ldexp(1.0f, -24));  // the smallest subnormal
    EXPECT_EQ(r16(std::ldexp(1.0f, -25)), 0.0f);                   // a tie with zero: even
    EXPECT_EQ(r16(std::ldexp(3.0f, -26)), std::ldexp(1.0f, -24));
    EXPECT_EQ(r16(1.0f + std::ldexp(1.0f, -11)), 1.0f);  // tie between 1 and 1 + 2^-10: even
    EXPECT_EQ(r16(1.0f + std::ldexp(3.0f, -11)), 1.0f + std::ldexp(1.0f, -9));
    EXPECT_TRUE(std::isnan(r16(std::numeric_limits<float>::quiet_NaN())));
}

TEST(Fp16, VectorAndTailPathsAgree) {
    std::vector<float> x(29), one(29), all(29);
    for (size_t i = 0; i < x.size(); ++i)
        x[i] = std::sin(float(i) * 0.7f) * std::ldexp(1.0f, int(i % 7) * 3 - 10);
    for (size_t i = 0; i < x.size(); ++i) one[i] = r16(x[i]);
    round_to_fp16(all.data(), x.data(), int64_t(x.size()));
    EXPECT_EQ(all, one);
}

TEST(Fp16, LinearIsWithinHalfPrecisionAndOverflowsLikeHalf) {
    const int64_t N = 5, C = 7, OC = 3;
    std::vector<float> x(N * C), w(OC * C), b(OC), y(N * OC), ref(N * OC);
    for (int64_t i = 0; i < N * C; ++i) x[size_t(i)] = std::cos(float(i)) * 2.0f;
    for (int64_t i = 0; i < OC * C; ++i) w[size_t(i)] = std::sin(float(i) * 1.3f);
    for (int64_t i = 0; i < OC; ++i) b[size_t(i)] = 0.25f * float(i);
    matmul_forward(ref.data(), x.data(), w.data(), b.data(), N, C, OC, WeightLayout::out_in);
    matmul_forward_fp16(y.data(), x.data(), w.data(), b.data(), N, C, OC, WeightLayout::out_in);
    bool differs = false;
    for (int64_t i = 0; i < N * OC; ++i) {
        EXPECT_NEAR(y[size_t(i)], ref[size_t(i)], 4e-3 * (std::fabs(ref[size_t(i)]) + 1.0f));
        EXPECT_EQ(y[size_t(i)], r16(y[size_t(i)])) << "outputs are fp16 values";
        differs |= y[size_t(i)] != ref[size_t(i)];
    }
    EXPECT_TRUE(differs);

    // 300 x 300 = 90000 does not fit in fp16.
    std::vector<float> big_x = {300.0f}, big_w = {300.0f}, out(1);
    matmul_forward_fp16(out.data(), big_x.data(), big_w.data(), nullptr, 1, 1, 1,
                        WeightLayout::out_in);
    EXPECT_TRUE(std::isinf(out[0]));
    // Backward: a gradient of 2^-26 on an input of 1 flushes to zero in fp16
    // (what loss scaling prevents), and weight gradients accumulate (+=).
    std::vector<float> one = {1.0f}, tiny = {std::ldexp(1.0f, -26)}, dw = {0.5f}, dx(1),
                       db = {0.0f};
    matmul_backward_fp16(dx.data(), dw.data(), db.data(), tiny.data(), one.data(), one.data(), 1, 1,
                         1, WeightLayout::out_in);
    EXPECT_EQ(dw[0], 0.5f);
    EXPECT_EQ(dx[0], 0.0f);
    std::vector<float> scaled = {std::ldexp(1.0f, -10)};
    matmul_backward_fp16(dx.data(), dw.data(), db.data(), scaled.data(), one.data(), one.data(), 1,
                         1, 1, WeightLayout::out_in, true);
    EXPECT_EQ(dw[0], 0.5f + std::ldexp(1.0f, -10));
    EXPECT_EQ(dx[0], std::ldexp(1.0f, -10));
    EXPECT_EQ(db[0], std::ldexp(1.0f, -10));
}

}  // namespace
}  // namespace loom
