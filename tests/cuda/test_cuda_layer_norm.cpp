// The CUDA table's layer norm forward and backward entries against the CPU
// implementation.
#include "cuda_test_util.h"
#include "ops/layer_norm.h"

namespace loom::test {
namespace {

template <typename T>
class CudaLayerNorm : public CudaTypedOpTest<T> {};
TYPED_TEST_SUITE(CudaLayerNorm, DeviceTypes, TypeNames);

struct LnCase {
    int64_t N, C;
    float offset;  // added to every input: a large mean tests the two-pass variance
};
constexpr LnCase k_cases[] = {{1, 1, 0.0f},    {3, 5, 0.0f},    {64, 768, 0.0f},
                              {17, 33, 10.0f}, {5, 1031, 0.0f}, {257, 64, -3.0f}};

TYPED_TEST(CudaLayerNorm, ForwardBackwardMatchCpu) {
    using T = TypeParam;
    for (const LnCase& c : k_cases) {
        const std::string tag = "N=" + std::to_string(c.N) + " C=" + std::to_string(c.C);
        const size_t NC = size_t(c.N * c.C);
        auto x = random_vec(NC, 1, -2.0f, 2.0f);
        for (float& v : x) v += c.offset;
        x = round_all<T>(x);
        auto w = round_all<T>(random_vec(size_t(c.C), 2, 0.5f, 1.5f));
        auto b = round_all<T>(random_vec(size_t(c.C), 3));
        auto dy = round_all<T>(random_vec(NC, 4));
        auto dx0 = round_all<T>(random_vec(NC, 5));           // for the accumulate path
        auto dw0 = round_all<T>(random_vec(size_t(c.C), 6));  // params accumulate
        auto db0 = round_all<T>(random_vec(size_t(c.C), 7));
        const double eps = 1e-5;

        std::vector<float> y(NC), mean(size_t(c.N)), rstd(size_t(c.N));
        layer_norm_forward<float>(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                                  c.N, c.C, eps);
        std::vector<float> dx = dx0, dw = dw0, db = db0;
        layer_norm_backward<float>(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                                   mean.data(), rstd.data(), c.N, c.C, /*accumulate_dinp=*/true);

        auto dxd = upload<T>(x), dwd = upload<T>(w), dbd = upload<T>(b), ddy = upload<T>(dy);
        DeviceBuffer<T> out(NC);
        DeviceBuffer<float> dmean(size_t(c.N)), drstd(size_t(c.N));
        const OpCtx g = this->template gpu<T>();
        g.nn().layer_norm_forward(g, out.get(), dmean.get(), drstd.get(), dxd->get(), dwd->get(),
                                  dbd->get(), c.N, c.C, eps);
        EXPECT_TRUE(all_close(tag + " out", download(out), y, tol_for<T>(2e-5, 1e-4)));
        EXPECT_TRUE(all_close(tag + " mean", download(dmean), mean, tol_for<T>(1e-5, 1e-5)));
        // rstd is fp32 on the device for every T; inputs are identical, so only
        // summation order separates it from the CPU.
        EXPECT_TRUE(all_close(tag + " rstd", download(drstd), rstd, Tol{1e-4, 1e-4}));

        auto gdx = upload<T>(dx0), gdw = upload<T>(dw0), gdb = upload<T>(db0);
        g.nn().layer_norm_backward(g, gdx->get(), gdw->get(), gdb->get(), ddy->get(), dxd->get(),
                                   dwd->get(), dmean.get(), drstd.get(), c.N, c.C, true);
        EXPECT_TRUE(all_close(tag + " dinp (+=)", download(*gdx), dx, tol_for<T>(5e-5, 1e-4)));
        EXPECT_TRUE(all_close(tag + " dweight", download(*gdw), dw, tol_for<T>(1e-4, 1e-4)));
        EXPECT_TRUE(all_close(tag + " dbias", download(*gdb), db, tol_for<T>(1e-4, 1e-4)));

        // Overwrite mode: dinp ignores what was there.
        DeviceBuffer<T> dx_over(NC);
        std::vector<float> dx_cpu(NC, 123.0f), dw_tmp = dw0, db_tmp = db0;
        layer_norm_backward<float>(dx_cpu.data(), dw_tmp.data(), db_tmp.data(), dy.data(), x.data(),
                                   w.data(), mean.data(), rstd.data(), c.N, c.C, false);
        g.nn().layer_norm_backward(g, dx_over.get(), nullptr, nullptr, ddy->get(), dxd->get(),
                                   dwd->get(), dmean.get(), drstd.get(), c.N, c.C, false);
        EXPECT_TRUE(
            all_close(tag + " dinp (=)", download(dx_over), dx_cpu, tol_for<T>(5e-5, 1e-4)));
    }
}

class CudaLayerNormDeterminism : public CudaOpTest {};

TEST_F(CudaLayerNormDeterminism, SameBitsEveryRun) {
    const OpCtx g = gpu<float>();
    const int64_t N = 4096, C = 768;
    auto x = upload<float>(random_vec(size_t(N * C), 1));
    auto w = upload<float>(random_vec(size_t(C), 2));
    auto dy = upload<float>(random_vec(size_t(N * C), 3));
    DeviceBuffer<float> y(size_t(N * C)), mean(static_cast<size_t>(N)),
        rstd(static_cast<size_t>(N)), dx(size_t(N * C));
    g.nn().layer_norm_forward(g, y.get(), mean.get(), rstd.get(), x->get(), w->get(), nullptr, N, C,
                              1e-5);
    std::vector<float> first;
    for (int run = 0; run < 3; ++run) {
        DeviceBuffer<float> dw(static_cast<size_t>(C)), db(static_cast<size_t>(C));
        g.nn().layer_norm_backward(g, dx.get(), dw.get(), db.get(), dy->get(), x->get(), w->get(),
                                   mean.get(), rstd.get(), N, C, false);
        auto got = download(dw);
        if (run == 0)
            first = got;
        else
            EXPECT_TRUE(bit_equal("dweight run " + std::to_string(run), got, first));
    }
}

}  // namespace
}  // namespace loom::test
