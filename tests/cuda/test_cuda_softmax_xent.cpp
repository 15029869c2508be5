// The CUDA table's softmax cross-entropy forward (sum + count) and backward
// entries against the CPU.
#include "core/check.h"
#include "cuda_test_util.h"
#include "ops/softmax_xent.h"

namespace loom::test {
namespace {

template <typename T>
class CudaSoftmaxXent : public CudaTypedOpTest<T> {};
TYPED_TEST_SUITE(CudaSoftmaxXent, DeviceTypes, TypeNames);

struct XentCase {
    int64_t N, V;
    int ignore_every;  // every k-th target is -100 (0: none)
};
constexpr XentCase k_cases[] = {{1, 1, 0},     {1, 5, 0},      {7, 13, 3}, {64, 1000, 5},
                                {3, 50257, 2}, {33, 30522, 0}, {4, 7, 1} /* every row ignored */};

TYPED_TEST(CudaSoftmaxXent, ForwardBackwardMatchCpu) {
    using T = TypeParam;
    for (const XentCase& c : k_cases) {
        const std::string tag = "N=" + std::to_string(c.N) + " V=" + std::to_string(c.V);
        auto logits = round_all<T>(random_vec(size_t(c.N * c.V), 1, -6.0f, 6.0f));
        auto targets = random_ids(size_t(c.N), c.V, 2);
        if (c.ignore_every)
            for (size_t i = 0; i < targets.size(); i += size_t(c.ignore_every))
                targets[i] = k_ignore_index;
        std::vector<float> losses(size_t(c.N)), dlogits(size_t(c.N * c.V));
        const XentSum want =
            softmax_xent_forward<float>(losses.data(), logits.data(), targets.data(), c.N, c.V);
        const double scale = want.count ? 1.0 / double(want.count) : 0.0;
        softmax_xent_backward<float>(dlogits.data(), logits.data(), targets.data(), c.N, c.V,
                                     scale);

        auto dl = upload<T>(logits);
        auto dt = upload_raw<int64_t>(targets);
        DeviceBuffer<T> dlosses(size_t(c.N)), dgrad(size_t(c.N * c.V));
        const OpCtx g = this->template gpu<T>();
        const XentSum got =
            g.nn().softmax_xent_forward(g, dlosses.get(), dl->get(), dt->get(), c.N, c.V);
        EXPECT_EQ(got.count, want.count) << tag;
        EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-5 * (1.0 + std::fabs(want.loss_sum))) << tag;
        EXPECT_TRUE(all_close(tag + " losses", download(dlosses), losses, tol_for<T>(1e-5, 1e-5)));
        g.nn().softmax_xent_backward(g, dgrad.get(), dl->get(), dt->get(), c.N, c.V, scale);
        EXPECT_TRUE(all_close(tag + " dlogits", download(dgrad), dlogits, tol_for<T>(1e-7, 1e-4)));
        // In place (dlogits aliases logits), as the fused classifier uses it.
        g.nn().softmax_xent_backward(g, dl->get(), dl->get(), dt->get(), c.N, c.V, scale);
        EXPECT_TRUE(
            all_close(tag + " dlogits in place", download(*dl), dlogits, tol_for<T>(1e-7, 1e-4)));
    }
}

class CudaSoftmaxXentErrors : public CudaOpTest {};

TEST_F(CudaSoftmaxXentErrors, BadTargetThrowsNamingRowAndTarget) {
    auto logits = upload<float>(random_vec(3 * 4, 1));
    auto targets = upload_raw<int64_t>({1, k_ignore_index, 4});
    try {
        const OpCtx g = gpu<float>();
        g.nn().softmax_xent_forward(g, nullptr, logits->get(), targets->get(), 3, 4);
        FAIL() << "target 4 with V = 4 was accepted";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("target 4"), std::string::npos) << msg;
        EXPECT_NE(msg.find("row 2"), std::string::npos) << msg;
    }
}

}  // namespace
}  // namespace loom::test
