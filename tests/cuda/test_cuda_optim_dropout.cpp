// The CUDA table's AdamW and dropout entries against the CPU implementation. Dropout must draw the
// CPU's exact mask (same Philox function), so kept/dropped positions are
// compared exactly, not within a tolerance.
#include "core/check.h"
#include "cuda_test_util.h"
#include "ops/adamw.h"
#include "ops/dropout.h"

namespace loom::test {
namespace {

class CudaAdamW : public CudaOpTest {
  protected:
    // The table's adamw over one run of n elements (decayed), fp32 gradients.
    void adamw(float* p, const void* g, DType g_type, float* m, float* v, void* copy, int64_t n,
               const AdamWParams& hp, int64_t step, float grad_scale = 1.0f) {
        const UpdateBuffers b{p, g, g_type, m, v, copy, g_type};
        const UpdateRun run{0, 0, n, true};
        backend().ops().adamw(backend(), b, std::span(&run, 1), hp, step, grad_scale);
    }
};

TEST_F(CudaAdamW, Fp32MatchesCpuOverSteps) {
    for (int64_t n : {int64_t(1), int64_t(1000), int64_t(100003)}) {
        AdamWParams hp;
        hp.lr = 3e-3;
        hp.weight_decay = 0.1;
        auto p = random_vec(size_t(n), 1);
        std::vector<float> m(size_t(n), 0.0f), v(size_t(n), 0.0f);
        auto dp = upload<float>(p), dm = upload<float>(m), dv = upload<float>(v);
        for (int64_t step = 1; step <= 5; ++step) {
            auto g = random_vec(size_t(n), uint32_t(10 + step));
            auto dg = upload<float>(g);
            adamw_update(p.data(), g.data(), m.data(), v.data(), n, hp, step);
            adamw(dp->get(), dg->get(), DType::f32, dm->get(), dv->get(), nullptr, n, hp, step);
        }
        const std::string tag = "n=" + std::to_string(n);
        // Both sides follow torch 1.13's rounding sequence with IEEE sqrt and
        // division, so fp32 results are identical, not merely close.
        EXPECT_TRUE(bit_equal(tag + " param", download(*dp), p));
        EXPECT_TRUE(bit_equal(tag + " m", download(*dm), m));
        EXPECT_TRUE(bit_equal(tag + " v", download(*dv), v));
    }
}

// grad_scale (clipping, loss-scale removal) is the CPU's scale_grads then
// adamw_update: one fp32 rounding of g * s, bit for bit.
TEST_F(CudaAdamW, GradScaleEqualsScalingTheGradientsFirst) {
    const int64_t n = 4099;
    AdamWParams hp;
    hp.lr = 1e-3;
    auto p = random_vec(size_t(n), 3);
    std::vector<float> m(size_t(n), 0.0f), v(size_t(n), 0.0f);
    auto dp = upload<float>(p), dm = upload<float>(m), dv = upload<float>(v);
    const float s = 0.37f;
    for (int64_t step = 1; step <= 3; ++step) {
        auto g = random_vec(size_t(n), uint32_t(40 + step));
        auto dg = upload<float>(g);
        for (float& x : g) x *= s;
        adamw_update(p.data(), g.data(), m.data(), v.data(), n, hp, step);
        adamw(dp->get(), dg->get(), DType::f32, dm->get(), dv->get(), nullptr, n, hp, step, s);
    }
    EXPECT_TRUE(bit_equal("param", download(*dp), p));
    EXPECT_TRUE(bit_equal("v", download(*dv), v));
}

TEST_F(CudaAdamW, MixedPrecisionUpdatesMasterAndCopy) {
    const int64_t n = 4099;
    AdamWParams hp;
    auto master = random_vec(size_t(n), 1);
    auto g = round_all<__nv_bfloat16>(random_vec(size_t(n), 2));
    std::vector<float> m(size_t(n), 0.0f), v(size_t(n), 0.0f);
    auto dmaster = upload<float>(master), dm = upload<float>(m), dv = upload<float>(v);
    auto dg = upload<__nv_bfloat16>(g);
    DeviceBuffer<__nv_bfloat16> copy(static_cast<size_t>(n));
    adamw_update(master.data(), g.data(), m.data(), v.data(), n, hp, 1);
    adamw(dmaster->get(), dg->get(), DType::bf16, dm->get(), dv->get(), copy.get(), n, hp, 1);
    EXPECT_TRUE(bit_equal("master", download(*dmaster), master));
    // The copy is the master rounded once: compare against rounding the GPU master.
    auto gpu_master = download(*dmaster);
    EXPECT_TRUE(bit_equal("bf16 copy", download(copy), round_all<__nv_bfloat16>(gpu_master)));
}

TEST_F(CudaAdamW, StepZeroIsRejected) {
    DeviceBuffer<float> p(4), g(4), m(4), v(4);
    EXPECT_THROW(
        adamw(p.get(), g.get(), DType::f32, m.get(), v.get(), nullptr, 4, AdamWParams{}, 0), Error);
}

template <typename T>
class CudaDropout : public CudaTypedOpTest<T> {};
TYPED_TEST_SUITE(CudaDropout, DeviceTypes, TypeNames);

TYPED_TEST(CudaDropout, SameMaskAsCpu) {
    using T = TypeParam;
    struct Case {
        int64_t B, per_sample, sample_offset;
        float p;
    };
    for (Case c : {Case{1, 1, 0, 0.5f}, Case{3, 17, 0, 0.1f}, Case{4, 4096, 12, 0.1f},
                   Case{2, 1001, 5, 0.9f}, Case{2, 64, 0, 0.0f}}) {
        const std::string tag = "B=" + std::to_string(c.B) +
                                " per=" + std::to_string(c.per_sample) +
                                " p=" + std::to_string(c.p);
        DropoutSpec d;
        d.p = c.p;
        d.stream = PhiloxStream(1234567, 42, (3u << 8) | 1u);
        d.sample_offset = c.sample_offset;
        const size_t n = size_t(c.B * c.per_sample);
        // Inputs bounded away from 0 so "dropped" is unambiguous.
        auto x = round_all<T>(random_vec(n, 7, 0.5f, 2.0f));
        std::vector<float> y(n), dx(n);
        dropout_forward<float>(y.data(), x.data(), c.B, c.per_sample, d);
        dropout_backward<float>(dx.data(), x.data(), c.B, c.per_sample, d);
        auto dxv = upload<T>(x);
        DeviceBuffer<T> out(n), din(n);
        const OpCtx g = this->template gpu<T>();
        g.nn().dropout_forward(g, out.get(), dxv->get(), c.B, c.per_sample, d);
        g.nn().dropout_backward(g, din.get(), dxv->get(), c.B, c.per_sample, d);
        auto got = download(out);
        size_t mask_mismatch = 0;
        for (size_t i = 0; i < n; ++i) mask_mismatch += (got[i] == 0.0f) != (y[i] == 0.0f);
        EXPECT_EQ(mask_mismatch, 0u) << tag << ": kept/dropped positions differ from the CPU";
        EXPECT_TRUE(all_close(tag + " fwd", got, y, tol_for<T>(1e-7, 1e-6)));
        EXPECT_TRUE(all_close(tag + " bwd", download(din), dx, tol_for<T>(1e-7, 1e-6)));
        // In place.
        g.nn().dropout_forward(g, dxv->get(), dxv->get(), c.B, c.per_sample, d);
        EXPECT_TRUE(all_close(tag + " fwd in place", download(*dxv), y, tol_for<T>(1e-7, 1e-6)));
    }
}

}  // namespace
}  // namespace loom::test
