// AdamW over the flat buffers (decay policies, frozen rows, multi-step torch
// semantics, state round trip) and global-norm gradient clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "hf_fixture.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"

namespace loom::test {
namespace {

std::unique_ptr<Model> fixture_model(const std::string& name) {
    auto m = build_model(load_hf_config(hf_dir() + "/" + name));
    m->load(SafetensorsFile::open(hf_dir() + "/" + name + "/model.safetensors"));
    return m;
}

// Fills every trainable gradient with a deterministic pattern.
void fill_grads(ParamTable& t, float scale) {
    for (int i = 0; i < t.size(); ++i) {
        if (!t.row(i).trainable) continue;
        float* g = t.grad(i);
        for (int64_t k = 0; k < t.row(i).numel(); ++k)
            g[k] = scale * float(std::sin(0.37 * double(k + 13 * i)));
    }
}

TEST(AdamW, TablePolicyExemptsBiasAndLayerNorm) {
    auto m = fixture_model("bert-cls");
    ParamTable& t = m->params();
    const std::vector<float> before(t.params_data(), t.params_data() + t.flat_numel());
    m->zero_grad();  // zero gradients: only weight decay moves parameters
    AdamW opt(t, AdamWParams{0.1, 0.9, 0.999, 1e-8, 0.5}, DecayPolicy::table);
    opt.step();
    int decayed = 0, kept = 0;
    for (int i = 0; i < t.size(); ++i) {
        const ParamRow& r = t.row(i);
        const bool is_bias_or_norm = r.name.find("bias") != std::string::npos ||
                                     r.name.find("LayerNorm") != std::string::npos;
        EXPECT_EQ(r.decay, !is_bias_or_norm) << r.name;
        const float* p = t.param(i);
        const float* p0 = before.data() + r.offset;
        for (int64_t k = 0; k < std::min<int64_t>(r.numel(), 4); ++k)
            EXPECT_FLOAT_EQ(p[k], r.decay ? p0[k] * (1.0f - 0.05f) : p0[k]) << r.name;
        (r.decay ? decayed : kept)++;
    }
    EXPECT_GT(decayed, 0);
    EXPECT_GT(kept, 0);
}

TEST(AdamW, FrozenRowsAreNeverUpdated) {
    ModelConfig c = load_hf_config(hf_dir() + "/distilbert-cls");
    c.sinusoidal_pos_embds = true;
    auto m = build_model(c);
    m->init(1);
    ParamTable& t = m->params();
    const int pos = t.index("distilbert.embeddings.position_embeddings.weight");
    EXPECT_FALSE(t.row(pos).trainable);
    // Sinusoidal table: row 1 = [sin(1), cos(1), sin(1/10000^(2/64)), ...].
    EXPECT_FLOAT_EQ(t.param(pos)[64 + 0], float(std::sin(1.0)));
    EXPECT_FLOAT_EQ(t.param(pos)[64 + 1], float(std::cos(1.0)));
    EXPECT_FLOAT_EQ(t.param(pos)[64 + 2], float(std::sin(1.0 / std::pow(10000.0, 2.0 / 64))));
    const std::vector<float> before(t.param(pos), t.param(pos) + t.row(pos).numel());

    const Fixture f("distilbert-cls");
    m->zero_grad();
    const LossSum l = m->forward(f.inputs(), DropoutPlan{});
    m->backward(1.0 / double(l.count));
    for (int64_t k = 0; k < t.row(pos).numel(); ++k) ASSERT_EQ(t.grad(pos)[k], 0.0f);
    AdamW opt(t, AdamWParams{1e-2, 0.9, 0.999, 1e-8, 0.1}, DecayPolicy::all);
    opt.step();
    EXPECT_EQ(0, std::memcmp(before.data(), t.param(pos), before.size() * sizeof(float)));
    EXPECT_EQ(m->params().grad_tensors().count("distilbert.embeddings.position_embeddings.weight"), 0u);
}

// Three steps against torch.optim.AdamW's update written out in double.
TEST(AdamW, MultiStepMatchesTorchSemantics) {
    auto m = fixture_model("gpt2-lm");
    ParamTable& t = m->params();
    const AdamWParams hp{2e-3, 0.8, 0.99, 1e-6, 0.05};
    AdamW opt(t, hp, DecayPolicy::table);
    const int64_t n = t.flat_numel();
    std::vector<double> p(t.params_data(), t.params_data() + n);
    std::vector<double> mm(static_cast<size_t>(n), 0.0), vv(static_cast<size_t>(n), 0.0);
    std::vector<char> decay(size_t(n), 0);
    for (const ParamRow& r : t.rows())
        std::fill(decay.begin() + r.offset, decay.begin() + r.offset + r.numel(), char(r.decay));
    for (int step = 1; step <= 3; ++step) {
        fill_grads(t, 0.01f * float(step));
        opt.step();
        for (int64_t i = 0; i < n; ++i) {
            const double g = t.grads_data()[i];
            if (decay[size_t(i)]) p[size_t(i)] *= 1 - hp.lr * hp.weight_decay;
            mm[size_t(i)] = hp.beta1 * mm[size_t(i)] + (1 - hp.beta1) * g;
            vv[size_t(i)] = hp.beta2 * vv[size_t(i)] + (1 - hp.beta2) * g * g;
            const double bc1 = 1 - std::pow(hp.beta1, step), bc2 = 1 - std::pow(hp.beta2, step);
            p[size_t(i)] -= hp.lr / bc1 * mm[size_t(i)] / (std::sqrt(vv[size_t(i)]) / std::sqrt(bc2) + hp.eps);
        }
    }
    EXPECT_EQ(opt.step_count(), 3);
    double max_diff = 0;
    for (int64_t i = 0; i < n; ++i)
        max_diff = std::max(max_diff, std::fabs(double(t.params_data()[i]) - p[size_t(i)]));
    EXPECT_LT(max_diff, 2e-6);
}

TEST(AdamW, StateRoundTripContinuesIdentically) {
    auto a = fixture_model("bert-qa");
    auto b = fixture_model("bert-qa");
    AdamW oa(a->params(), AdamWParams{}, DecayPolicy::table);
    for (int s = 1; s <= 2; ++s) {
        fill_grads(a->params(), 0.1f / float(s));
        oa.step();
    }
    // b: same parameters, optimizer state restored from a's tensors.
    std::memcpy(b->params().params_data(), a->params().params_data(),
                size_t(a->params().flat_numel()) * sizeof(float));
    AdamW ob(b->params(), AdamWParams{}, DecayPolicy::table);
    std::map<std::string, Tensor> saved;
    for (const auto& [k, v] : oa.state_tensors()) saved[k] = v.clone();
    EXPECT_EQ(saved.size(), 2u * size_t(a->params().size()));
    ob.load_state(saved, oa.step_count());
    fill_grads(a->params(), 0.05f);
    fill_grads(b->params(), 0.05f);
    oa.step();
    ob.step();
    EXPECT_EQ(0, std::memcmp(a->params().params_data(), b->params().params_data(),
                             size_t(a->params().flat_numel()) * sizeof(float)));

    saved.erase("exp_avg.qa_outputs.bias");
    try {
        ob.load_state(saved, 3);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("exp_avg.qa_outputs.bias"), std::string::npos);
    }
}

TEST(GradClip, NormAndScaling) {
    auto m = fixture_model("albert-cls");
    ParamTable& t = m->params();
    fill_grads(t, 0.5f);
    double ref = 0;
    for (int i = 0; i < t.size(); ++i)
        for (int64_t k = 0; k < t.row(i).numel(); ++k) ref += double(t.grad(i)[k]) * t.grad(i)[k];
    ref = std::sqrt(ref);
    EXPECT_NEAR(std::sqrt(grad_norm_sq(t)), ref, 1e-9 * ref);
    // No clipping below the threshold.
    EXPECT_NEAR(clip_grad_norm(t, 10 * ref), ref, 1e-9 * ref);
    EXPECT_NEAR(std::sqrt(grad_norm_sq(t)), ref, 1e-9 * ref);
    // Clipping to 1.0 scales by 1 / (norm + 1e-6), torch's formula.
    EXPECT_NEAR(clip_grad_norm(t, 1.0), ref, 1e-9 * ref);
    EXPECT_NEAR(std::sqrt(grad_norm_sq(t)), ref / (ref + 1e-6), 1e-6);
    EXPECT_DOUBLE_EQ(clip_coefficient(0.5, 1.0), 1.0);
}

}  // namespace
}  // namespace loom::test
