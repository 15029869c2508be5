// The vectorisable float exp/erf/tanh/sigmoid against libm in double, on a
// dense sweep of their useful ranges (every 997th float, plus the split points).
#include <cstring>

#include "ops/vec_math.h"
#include "ops_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

// Max error in units of the float spacing at the reference value.
template <typename F, typename R>
double max_ulp(F f, R ref, float lo, float hi, float* worst) {
    double m = 0;
    for (float x = lo; x < hi;) {
        const double want = ref(double(x));
        const float a = std::fabs(float(want));
        const double ulp = double(std::nextafter(a, INFINITY) - a);
        const double err = std::fabs(double(f(x)) - want) / ulp;
        if (err > m) {
            m = err;
            *worst = x;
        }
        uint32_t u;
        std::memcpy(&u, &x, 4);
        u = x < 0 ? (u > 997 + 0x80000000u ? u - 997 : 0) : u + 997;  // step 997 floats
        std::memcpy(&x, &u, 4);
    }
    return m;
}

}  // namespace

TEST(VecMath, ExpWithinTwoUlp) {
    float worst = 0;
    const double e = max_ulp([](float x) { return vmath::exp(x); },
                             [](double x) { return std::exp(x); }, -87.0f, 88.0f, &worst);
    EXPECT_LE(e, 2.0) << "at x = " << worst;
}

TEST(VecMath, ErfWithinOneUlp) {
    float worst = 0;
    const double e = max_ulp([](float x) { return vmath::erf(x); },
                             [](double x) { return std::erf(x); }, -6.0f, 6.0f, &worst);
    EXPECT_LE(e, 1.0) << "at x = " << worst;
    for (float x : {0.927734375f, -0.927734375f, 0.0f, 1e-30f})  // branch edges, tiny
        EXPECT_NEAR(vmath::erf(x), std::erf(double(x)), 1.2e-7 * std::fabs(std::erf(double(x))));
}

TEST(VecMath, TanhAndSigmoidWithinThreeUlp) {
    float worst = 0;
    double e = max_ulp([](float x) { return vmath::tanh(x); },
                       [](double x) { return std::tanh(x); }, -12.0f, 12.0f, &worst);
    EXPECT_LE(e, 2.0) << "tanh at x = " << worst;
    e = max_ulp([](float x) { return vmath::sigmoid(x); },
                [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, -80.0f, 80.0f, &worst);
    EXPECT_LE(e, 3.0) << "sigmoid at x = " << worst;
}

TEST(VecMath, ExtremeInputsStayFinite) {
    EXPECT_GT(vmath::exp(-1000.0f), 0.0f);
    EXPECT_TRUE(std::isfinite(vmath::exp(1000.0f)));
    EXPECT_EQ(vmath::erf(100.0f), 1.0f);
    EXPECT_EQ(vmath::erf(-100.0f), -1.0f);
    EXPECT_EQ(vmath::tanh(50.0f), 1.0f);
    EXPECT_EQ(vmath::tanh(-50.0f), -1.0f);
    EXPECT_TRUE(std::isnan(vmath::exp(std::nanf(""))));
}
