// Dropout: the mask is a function of (stream, global element) only.
#include <omp.h>

#include "ops/dropout.h"
#include "ops_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

DropoutSpec spec(float p, int64_t sample_offset = 0) {
    DropoutSpec d;
    d.p = p;
    d.stream = PhiloxStream(1234, 17, 3);
    d.sample_offset = sample_offset;
    return d;
}

}  // namespace

TEST(Dropout, MultipliersEqualScalarKeep) {
    // The vectorised Philox must agree with DropoutSpec::keep everywhere,
    // including runs that start and end off a 64-draw boundary, and one
    // across block 2^32, where the counter's low word wraps to its high one.
    const DropoutSpec d = spec(0.37f);
    const float scale = dropout_scale<float>(d);
    for (uint64_t first : {uint64_t(0), uint64_t(3), uint64_t(61), uint64_t(1) << 33,
                           (uint64_t(1) << 34) - 5003}) {
        const int64_t n = 10007;
        std::vector<float> f(static_cast<size_t>(n));
        dropout_multipliers(f.data(), d, first, n);
        for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(f[size_t(i)], d.keep(first + uint64_t(i)) ? scale : 0.0f)
                << "element " << first + uint64_t(i);
    }
}

TEST(Dropout, SplittingTheBatchGivesTheSameMask) {
    const int64_t B = 6, per_sample = 1000;
    std::vector<double> x = randn(B * per_sample, 1);
    std::vector<float> xf = to_f32(x), full(xf.size()), halves(xf.size());
    dropout_forward<float>(full.data(), xf.data(), B, per_sample, spec(0.1f, 10));
    // Samples [0, 3) as one batch at offset 10, samples [3, 6) at offset 13.
    dropout_forward<float>(halves.data(), xf.data(), 3, per_sample, spec(0.1f, 10));
    dropout_forward<float>(halves.data() + 3 * per_sample, xf.data() + 3 * per_sample, 3,
                           per_sample, spec(0.1f, 13));
    EXPECT_TRUE(all_close("split batch", halves, full, Tol{0, 0}));
}

TEST(Dropout, SameMaskWhateverTheThreadCount) {
    const int64_t B = 4, per_sample = 50000;
    std::vector<float> x = to_f32(randn(B * per_sample, 2)), one(x.size()), two(x.size());
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    dropout_forward<float>(one.data(), x.data(), B, per_sample, spec(0.5f));
    omp_set_num_threads(2);
    dropout_forward<float>(two.data(), x.data(), B, per_sample, spec(0.5f));
    omp_set_num_threads(saved);
    EXPECT_TRUE(all_close("1 vs 2 threads", two, one, Tol{0, 0}));
}

TEST(Dropout, RateAndScale) {
    const int64_t n = 1 << 20;
    for (float p : {0.1f, 0.5f}) {
        std::vector<float> ones(static_cast<size_t>(n), 1.0f), out(static_cast<size_t>(n));
        dropout_forward<float>(out.data(), ones.data(), 1, n, spec(p));
        int64_t dropped = 0;
        const float scale = 1.0f / (1.0f - p);
        for (float v : out) {
            if (v == 0.0f) {
                ++dropped;
            } else {
                ASSERT_FLOAT_EQ(v, scale);
            }
        }
        // Binomial(n, p): 6 standard deviations.
        const double rate = double(dropped) / double(n);
        EXPECT_NEAR(rate, p, 6.0 * std::sqrt(p * (1 - p) / double(n))) << "p = " << p;
    }
}

TEST(Dropout, DifferentStreamsDifferentMasks) {
    const int64_t n = 4096;
    std::vector<float> f1(static_cast<size_t>(n)), f2(static_cast<size_t>(n));
    DropoutSpec a = spec(0.5f), b = spec(0.5f);
    b.stream = PhiloxStream(1234, 18, 3);  // next step
    dropout_multipliers(f1.data(), a, 0, n);
    dropout_multipliers(f2.data(), b, 0, n);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) differ += f1[size_t(i)] != f2[size_t(i)];
    EXPECT_GT(differ, n / 3);  // independent masks disagree on ~half
}

TEST(Dropout, InactiveIsIdentityAndBackwardUsesTheSameMask) {
    const int64_t n = 777;
    std::vector<float> x = to_f32(randn(n, 3)), y(x.size());
    dropout_forward<float>(y.data(), x.data(), 1, n, spec(0.0f));
    EXPECT_EQ(y, x);
    // In place, forward then backward of ones: both equal the multipliers.
    std::vector<float> fwd = x, ones(x.size(), 1.0f), f(x.size());
    dropout_forward<float>(fwd.data(), fwd.data(), 1, n, spec(0.2f, 7));
    dropout_backward<float>(ones.data(), ones.data(), 1, n, spec(0.2f, 7));
    dropout_multipliers(f.data(), spec(0.2f), uint64_t(7 * n), n);
    EXPECT_EQ(ones, f);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(fwd[size_t(i)], x[size_t(i)] * f[size_t(i)]);
}
