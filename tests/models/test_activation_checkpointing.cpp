// Activation checkpointing (Model::set_activation_checkpointing): for every
// model family, with dropout on, the loss and every gradient are bitwise those
// of the run that keeps all activations, for checkpointing every layer and
// every k-th; the planned activation memory shrinks accordingly; and turning
// it off again restores the plain plan.
#include <gtest/gtest.h>

#include <vector>

#include "hf_fixture.h"

namespace loom::test {
namespace {

struct StepResult {
    double loss = 0;
    std::vector<float> grads;
    int64_t act_bytes = 0;
};

StepResult step(Model& m, const ModelInputs& in, int64_t every_k) {
    m.set_activation_checkpointing(every_k);
    m.zero_grad();
    DropoutPlan drop;
    drop.training = true;
    drop.seed = 1234;
    drop.step = 3;
    const LossSum l = m.forward(in, drop);
    EXPECT_GT(l.count, 0);
    m.backward(1.0 / double(l.count));
    const ParamTable& t = m.params();
    StepResult r;
    r.loss = l.sum;
    r.grads.assign(t.grads_data(), t.grads_data() + t.flat_numel());
    r.act_bytes = m.activation_bytes();
    return r;
}

TEST(ActivationCheckpointing, GradientsAreBitwiseTheKeptActivationsOnes) {
    for (const std::string& name : hf_fixture_names()) {
        SCOPED_TRACE(name);
        const Fixture f(name);
        ModelConfig c = f.config;
        c.hidden_dropout = c.embedding_dropout = c.attention_dropout = 0.2;
        auto m = build_model(c);
        m->init(11);
        const ModelInputs in = f.inputs();
        const StepResult plain = step(*m, in, 0);
        for (int64_t k : {1, 2, 3}) {
            SCOPED_TRACE("every " + std::to_string(k));
            const StepResult ck = step(*m, in, k);
            EXPECT_EQ(ck.loss, plain.loss);
            ASSERT_EQ(ck.grads.size(), plain.grads.size());
            size_t mismatches = 0;
            for (size_t i = 0; i < ck.grads.size(); ++i)
                mismatches += ck.grads[i] != plain.grads[i];
            EXPECT_EQ(mismatches, 0u);
            // Checkpointed applications share one set of activations, so the
            // plan shrinks once two or more of them are checkpointed.
            const int64_t shared = (c.num_hidden_layers + k - 1) / k;
            if (shared >= 2) {
                EXPECT_LT(ck.act_bytes, plain.act_bytes);
            } else {
                EXPECT_EQ(ck.act_bytes, plain.act_bytes);
            }
        }
        const StepResult again = step(*m, in, 0);
        EXPECT_EQ(again.act_bytes, plain.act_bytes);
        EXPECT_EQ(again.grads, plain.grads);
    }
}

// Checkpointing every layer keeps one layer's activations instead of L: the
// plan shrinks by (L - 1) layers' worth, and every 2nd by about half of that.
TEST(ActivationCheckpointing, PlanShrinksByTheLayersNotKept) {
    const Fixture f("bert-mlm");
    ModelConfig c = f.config;
    c.num_hidden_layers = 6;
    auto m = build_model(c);
    m->init(5);
    const ModelInputs in = f.inputs();
    const int64_t none = step(*m, in, 0).act_bytes;
    const int64_t all = step(*m, in, 1).act_bytes;
    const int64_t half = step(*m, in, 2).act_bytes;
    const int64_t per_layer = (none - all) / 5;
    ASSERT_GT(per_layer, 0);
    EXPECT_EQ(none - all, 5 * per_layer);
    EXPECT_EQ(none - half, 2 * per_layer);  // layers 0, 2, 4 share one set
}

}  // namespace
}  // namespace loom::test
