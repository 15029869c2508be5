// The CUDA table's element-wise and activation entries against the CPU
// implementation.
#include <utility>

#include "core/dtype.h"
#include "cuda_test_util.h"
#include "ops/activation.h"
#include "ops/elementwise.h"

namespace loom::test {
namespace {

template <typename T>
class CudaElementwise : public CudaTypedOpTest<T> {};
TYPED_TEST_SUITE(CudaElementwise, DeviceTypes, TypeNames);

constexpr int64_t k_sizes[] = {1, 7, 1000, 65537};

TYPED_TEST(CudaElementwise, ResidualAddScale) {
    using T = TypeParam;
    for (int64_t n : k_sizes) {
        auto a = round_all<T>(random_vec(size_t(n), 1));
        auto b = round_all<T>(random_vec(size_t(n), 2));
        std::vector<float> want(static_cast<size_t>(n));
        residual_forward<float>(want.data(), a.data(), b.data(), n);
        auto da = upload<T>(a), db = upload<T>(b);
        DeviceBuffer<T> out(static_cast<size_t>(n));
        const OpCtx g = this->template gpu<T>();
        g.nn().residual_forward(g, out.get(), da->get(), db->get(), n);
        EXPECT_TRUE(all_close("residual n=" + std::to_string(n), download(out), round_all<T>(want),
                              tol_for<T>(0, 0)));
        // In place, then scale: y = (a + b) * 0.5
        g.nn().add_inplace(g, da->get(), db->get(), n);
        g.ops().scale(*g.be, da->get(), g.act, n, 0.5f);
        add_inplace<float>(a.data(), b.data(), n);
        scale_inplace<float>(a.data(), 0.5f, n);
        EXPECT_TRUE(all_close("add+scale n=" + std::to_string(n), download(*da), a, tol_for<T>()));
    }
}

TYPED_TEST(CudaElementwise, SumSquaresMatchesFp64AndRepeats) {
    using T = TypeParam;
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(1000), int64_t(65537), int64_t(3000001)}) {
        const auto x = round_all<T>(random_vec(size_t(n), 5));
        double want = 0;
        for (float v : x) want += double(v) * double(v);
        auto dx = upload<T>(x);
        const std::vector<std::pair<int64_t, int64_t>> range = {{0, n}};
        double got[2] = {0, 0};
        Backend& be = this->backend();
        be.ops().sum_squares(be, dx->get(), Host<T>::dtype, range, &got[0]);
        be.ops().sum_squares(be, dx->get(), Host<T>::dtype, range, &got[1]);
        EXPECT_NEAR(got[0], want, 1e-9 * want + 1e-12) << "n=" << n;
        EXPECT_EQ(got[0], got[1]) << "n=" << n << ": two runs differ";
    }
}

TYPED_TEST(CudaElementwise, ActivationsForwardBackward) {
    using T = TypeParam;
    for (Activation act :
         {Activation::gelu_erf, Activation::gelu_tanh, Activation::relu, Activation::tanh}) {
        for (int64_t n : k_sizes) {
            const std::string tag = std::string(activation_name(act)) + " n=" + std::to_string(n);
            auto x = round_all<T>(random_vec(size_t(n), 11, -4.0f, 4.0f));
            auto g = round_all<T>(random_vec(size_t(n), 12));
            std::vector<float> y(static_cast<size_t>(n)), dx(static_cast<size_t>(n));
            activation_forward<float>(y.data(), x.data(), n, act);
            activation_backward<float>(dx.data(), x.data(), g.data(), n, act);
            auto dxv = upload<T>(x), dg = upload<T>(g);
            DeviceBuffer<T> out(static_cast<size_t>(n)), din(static_cast<size_t>(n));
            const OpCtx op = this->template gpu<T>();
            op.nn().activation_forward(op, out.get(), op.act, dxv->get(), n, act);
            op.nn().activation_backward(op, din.get(), dxv->get(), dg->get(), n, act);
            EXPECT_TRUE(all_close(tag + " fwd", download(out), y, tol_for<T>(1e-6, 1e-5)));
            EXPECT_TRUE(all_close(tag + " bwd", download(din), dx, tol_for<T>(1e-6, 1e-5)));
            // In-place backward (dinp aliases dout).
            op.nn().activation_backward(op, dg->get(), dxv->get(), dg->get(), n, act);
            EXPECT_TRUE(
                all_close(tag + " bwd in place", download(*dg), dx, tol_for<T>(1e-6, 1e-5)));
        }
    }
}

class CudaConvert : public CudaOpTest {};

TEST_F(CudaConvert, RoundTripsThroughBf16) {
    auto x = random_vec(1001, 5, -100.0f, 100.0f);
    auto dx = upload<float>(x);
    DeviceBuffer<__nv_bfloat16> h(x.size());
    DeviceBuffer<float> back(x.size());
    Backend& be = backend();
    const int64_t n = int64_t(x.size());
    be.ops().convert(be, h.get(), DType::bf16, dx->get(), DType::f32, n);
    be.ops().convert(be, back.get(), DType::f32, h.get(), DType::bf16, n);
    // Round-to-nearest-even must agree bit for bit with the CPU's f32_to_bf16.
    std::vector<float> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = bf16_to_f32(f32_to_bf16(x[i]));
    EXPECT_TRUE(bit_equal("bf16 round trip", download(back), want));
}

}  // namespace
}  // namespace loom::test
