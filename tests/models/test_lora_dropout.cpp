// lora_dropout (nn/lora.h): PEFT's dropout on the adapter's input only,
// out = base(x) + B(A(drop(x))) * scaling, in training only. The mask comes
// from the step's Philox keys, so a run is reproducible; it changes the loss
// and the adapter's gradients, leaves evaluation alone, and splitting the
// batch (sample_offset) draws the same masks. Layout independence under
// tensor parallelism is in test_lora_tp.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "hf_fixture.h"

namespace loom::test {
namespace {

struct Out {
    double loss = 0;
    int64_t count = 0;
    std::map<std::string, std::vector<float>> grads;  // adapter rows
};

// B nonzero, so A and the input see the adapter (PEFT starts B at zero).
void set_b(Model& m) {
    ParamTable& t = m.params();
    for (int i = 0; i < t.size(); ++i) {
        if (!t.row(i).adapter || t.row(i).name.find("lora_B") == std::string::npos) continue;
        float* p = t.param(i);
        for (int64_t e = 0; e < t.row(i).numel(); ++e)
            p[e] = float(0.05 * std::cos(0.3 * double(e)));
    }
    t.upload_params();
}

std::unique_ptr<Model> model(const Fixture& f, double p, DType compute) {
    ModelConfig c = f.config;
    c.lora.r = 4;
    c.lora.lora_alpha = 8;
    c.lora.lora_dropout = p;
    c.lora.target_modules = {"q_proj", "v_proj", "o_proj", "gate_proj", "down_proj"};
    auto m = build_model(c);
    m->set_compute_dtype(compute);
    m->load(SafetensorsFile::open(f.dir + "/model.safetensors"), 3);
    set_b(*m);
    return m;
}

Out step(Model& m, const ModelInputs& in, bool training, int64_t sample_offset = 0) {
    m.zero_grad();
    DropoutPlan d;
    d.training = training;
    d.seed = 5;
    d.step = 1;
    d.sample_offset = sample_offset;
    const LossSum l = m.forward(in, d);
    m.backward(1.0);  // sums, so micro-batches add up
    Out o;
    o.loss = l.sum;
    o.count = l.count;
    const ParamTable& t = m.params();
    t.download_grads();
    for (int i = 0; i < t.size(); ++i) {
        if (!t.row(i).adapter) continue;
        const Tensor g = t.grad_tensor(i);
        const float* p = g.data<float>();
        o.grads[t.row(i).name] = std::vector<float>(p, p + g.numel());
    }
    return o;
}

// Samples [lo, hi) of a causal-LM batch (every input (B, T)).
ModelInputs slice_batch(const ModelInputs& in, int64_t lo, int64_t hi) {
    ModelInputs s = in;
    s.B = hi - lo;
    auto at = [&](const int64_t* p) { return p ? p + lo * in.T : nullptr; };
    s.input_ids = at(in.input_ids);
    s.attention_mask = at(in.attention_mask);
    s.token_type_ids = at(in.token_type_ids);
    s.labels = at(in.labels);
    return s;
}

double max_diff(const Out& a, const Out& b) {
    double d = 0;
    for (const auto& [n, g] : a.grads)
        for (size_t e = 0; e < g.size(); ++e)
            d = std::max(d, std::fabs(double(g[e]) - double(b.grads.at(n)[e])));
    return d;
}

TEST(LoraDropout, ChangesTrainingOnlyAndIsReproducible) {
    const Fixture f("llama-lm");
    const ModelInputs in = f.inputs();
    for (const DType compute : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(dtype_name(compute));
        auto plain = model(f, 0.0, compute);
        auto dropped = model(f, 0.4, compute);
        const Out ref = step(*plain, in, true);
        const Out a = step(*dropped, in, true), b = step(*dropped, in, true);
        // Reproducible: the same keys draw the same masks, bit for bit.
        EXPECT_EQ(a.loss, b.loss);
        EXPECT_EQ(max_diff(a, b), 0.0);
        // Dropout changes the loss and every adapter's gradient.
        EXPECT_GT(std::fabs(a.loss - ref.loss), 1e-4 * std::fabs(ref.loss));
        for (const auto& [n, g] : a.grads) {
            double d = 0;
            for (size_t e = 0; e < g.size(); ++e)
                d = std::max(d, std::fabs(double(g[e]) - double(ref.grads.at(n)[e])));
            EXPECT_GT(d, 0.0) << n;
        }
        // Evaluation (training off) is the model without dropout.
        const Out ea = step(*dropped, in, false), eb = step(*plain, in, false);
        EXPECT_EQ(ea.loss, eb.loss);
        EXPECT_EQ(max_diff(ea, eb), 0.0);
    }
}

// Samples [0, h) and [h, B) as two micro-batches at their global offsets
// draw the whole batch's masks: their summed gradients are the one batch's.
TEST(LoraDropout, MasksAreKeyedByGlobalSample) {
    const Fixture f("llama-lm");
    const ModelInputs in = f.inputs();
    ASSERT_GE(in.B, 2);
    auto m = model(f, 0.4, DType::f32);
    const Out whole = step(*m, in, true);
    const int64_t h = in.B / 2;
    Out sum;
    for (const auto& [lo, hi] : {std::pair<int64_t, int64_t>{0, h}, {h, in.B}}) {
        const Out part = step(*m, slice_batch(in, lo, hi), true, lo);
        sum.loss += part.loss;
        for (const auto& [n, g] : part.grads) {
            std::vector<float>& s = sum.grads[n];
            s.resize(g.size());
            for (size_t e = 0; e < g.size(); ++e) s[e] += g[e];
        }
    }
    EXPECT_NEAR(sum.loss, whole.loss, 1e-5 * std::fabs(whole.loss));
    double scale = 0;
    for (const auto& [n, g] : whole.grads)
        for (float v : g) scale = std::max(scale, double(std::fabs(v)));
    EXPECT_LE(max_diff(sum, whole), 1e-5 * scale);
    // With another sample offset the masks differ.
    const Out shifted = step(*m, in, true, 1);
    EXPECT_GT(max_diff(shifted, whole), 0.0);
}

}  // namespace
}  // namespace loom::test
