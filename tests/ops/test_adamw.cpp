// AdamW against the torch.optim.AdamW update written out by hand in fp64.
#include "core/check.h"
#include "ops/adamw.h"
#include "ops_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

// One torch AdamW step (amsgrad off) in double, the formulas of adamw.h.
void reference_step(std::vector<double>& p, const std::vector<double>& g, std::vector<double>& m,
                    std::vector<double>& v, const AdamWParams& hp, int64_t t) {
    const double bc1 = 1 - std::pow(hp.beta1, double(t));
    const double bc2 = 1 - std::pow(hp.beta2, double(t));
    for (size_t i = 0; i < p.size(); ++i) {
        p[i] *= 1 - hp.lr * hp.weight_decay;
        m[i] = hp.beta1 * m[i] + (1 - hp.beta1) * g[i];
        v[i] = hp.beta2 * v[i] + (1 - hp.beta2) * g[i] * g[i];
        p[i] -= hp.lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + hp.eps);
    }
}

}  // namespace

TEST(AdamW, MatchesHandComputedUpdateAtSteps1And3) {
    const int64_t n = 40003;  // odd: vector tails and both threads
    AdamWParams hp;
    hp.lr = 3e-4;
    hp.beta1 = 0.9;
    hp.beta2 = 0.98;
    hp.eps = 1e-6;
    hp.weight_decay = 0.05;
    std::vector<double> p = round_f32(randn(n, 1, 0.5)), m(static_cast<size_t>(n), 0.0),
                        v(static_cast<size_t>(n), 0.0);
    std::vector<float> pf = to_f32(p), mf(static_cast<size_t>(n), 0.0f),
                       vf(static_cast<size_t>(n), 0.0f);
    for (int64_t t = 1; t <= 3; ++t) {
        // Gradients of very different sizes per step, as after a loss spike.
        const std::vector<double> g = round_f32(randn(n, uint64_t(10 + t), t == 2 ? 0.01 : 2.0));
        const std::vector<float> gf = to_f32(g);
        adamw_update(pf.data(), gf.data(), mf.data(), vf.data(), n, hp, t);
        reference_step(p, g, m, v, hp, t);
        if (t == 1 || t == 3) {
            const std::string at = " at t=" + std::to_string(t);
            EXPECT_TRUE(all_close("param" + at, pf, p, Tol{1e-9, 2e-6}));
            // m sums terms of both signs: its error is relative to the terms, not to m.
            EXPECT_TRUE(all_close("exp_avg" + at, mf, m, Tol{3e-7, 2e-6}));
            EXPECT_TRUE(all_close("exp_avg_sq" + at, vf, v, Tol{1e-12, 2e-6}));
        }
    }
}

TEST(AdamW, FirstStepMovesEachParamByAboutLr) {
    // At t = 1 the bias-corrected step is lr * g / (|g| + eps'): about lr * sign(g).
    const int64_t n = 1000;
    AdamWParams hp;
    hp.weight_decay = 0.0;
    std::vector<float> p(static_cast<size_t>(n), 1.0f),
        g = to_f32(randn(n, 5)), m(static_cast<size_t>(n), 0.0f), v(static_cast<size_t>(n), 0.0f);
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, hp, 1);
    for (int64_t i = 0; i < n; ++i) {
        const double want = 1.0 - hp.lr * (g[size_t(i)] > 0 ? 1.0 : -1.0);
        EXPECT_NEAR(p[size_t(i)], want, 1e-5 * hp.lr + 1e-7) << "index " << i;
    }
}

TEST(AdamW, DecoupledWeightDecayWithZeroGradient) {
    std::vector<float> p = {2.0f, -4.0f}, g = {0.0f, 0.0f}, m = {0.0f, 0.0f}, v = {0.0f, 0.0f};
    AdamWParams hp;
    hp.lr = 0.1;
    hp.weight_decay = 0.5;
    adamw_update(p.data(), g.data(), m.data(), v.data(), 2, hp, 1);
    EXPECT_FLOAT_EQ(p[0], 2.0f * 0.95f);
    EXPECT_FLOAT_EQ(p[1], -4.0f * 0.95f);
    EXPECT_THROW(adamw_update(p.data(), g.data(), m.data(), v.data(), 2, hp, 0), Error);
}

TEST(AdamW, RunsInOneRegionEqualOneCallPerRun) {
    // Odd-sized runs with alternating decay, params and state at different
    // offsets (a ZeRO shard), enough elements for two 64K-element chunks; the
    // chunk boundary cuts through a run, which must not change a single bit.
    const std::vector<int64_t> sizes = {37, 20001, 5, 16, 40000, 3, 12345};
    std::vector<UpdateRun> runs;
    int64_t p_off = 7, s_off = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
        runs.push_back({p_off, s_off, sizes[i], i % 2 == 0});
        p_off += sizes[i] + 3;  // gaps in the parameter buffer stay untouched
        s_off += sizes[i];
    }
    AdamWParams hp;
    hp.lr = 1e-3;
    hp.weight_decay = 0.1;
    const std::vector<float> p0 = to_f32(randn(p_off, 21)), g = to_f32(randn(s_off, 22));
    std::vector<float> pa = p0, ma(size_t(s_off), 0.0f), va(size_t(s_off), 0.0f);
    std::vector<float> pb = p0, mb = ma, vb = va;
    for (int64_t t = 1; t <= 2; ++t) {
        adamw_update_runs(pa.data(), g.data(), ma.data(), va.data(), runs, hp, t);
        for (const UpdateRun& r : runs) {
            AdamWParams h = hp;
            if (!r.decay) h.weight_decay = 0.0;
            adamw_update(pb.data() + r.param_offset, g.data() + r.state_offset,
                         mb.data() + r.state_offset, vb.data() + r.state_offset, r.n, h, t);
        }
    }
    EXPECT_EQ(pa, pb);
    EXPECT_EQ(ma, mb);
    EXPECT_EQ(va, vb);
    EXPECT_EQ(pa[0], p0[0]);  // before the first run
    EXPECT_NE(pa[7], p0[7]);  // a decayed, updated element
}
