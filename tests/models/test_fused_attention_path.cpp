// The model stack's fused-attention path, on the staged backend whose table
// carries the reference fused entries (tests/fused_attention_reference.h):
// every layer goes through them, the results are the CPU model's bit for bit,
// and a batch with a query row that sees no key (a wholly padded sample, or a
// causal sample whose first token is padding) is re-planned onto the unfused
// entries, with the HF rule for such rows, and back again for the next batch.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "hf_fixture.h"
#include "test_backends.h"

namespace loom::test {
namespace {

struct PassResult {
    std::vector<float> logits, grads;
    double loss = 0;
};

// One forward and backward of `model` on `in`: the logits, the loss and every
// gradient, read back to the host.
PassResult run_pass(Model& model, const ModelInputs& in) {
    model.zero_grad();
    const LossSum loss = model.forward(in, DropoutPlan{});
    model.backward(1.0 / double(loss.count));
    PassResult r;
    r.loss = loss.mean();
    const Tensor logits = model.outputs().at("logits");
    r.logits.assign(logits.data<float>(), logits.data<float>() + logits.numel());
    ParamTable& t = model.params();
    t.download_grads();
    r.grads.assign(t.grads_data(), t.grads_data() + t.flat_numel());
    return r;
}

void expect_same(const PassResult& a, const PassResult& b) {
    EXPECT_EQ(a.loss, b.loss);
    ASSERT_EQ(a.logits.size(), b.logits.size());
    EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)), 0);
    ASSERT_EQ(a.grads.size(), b.grads.size());
    EXPECT_EQ(std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * sizeof(float)), 0);
}

class FusedAttentionPath : public ::testing::TestWithParam<std::string> {};

TEST_P(FusedAttentionPath, EveryLayerFusedAndAsTheCpu) {
    const Fixture f(GetParam());
    auto cpu = f.load_model();
    auto staged = f.load_model(ParamDevice{&test_backend("staged")});
    poison_host_copies(staged->params());
    const int64_t layers = f.config.num_hidden_layers;
    ASSERT_GT(layers, 0);

    const FusedAttentionCalls before = fused_attention_calls();
    const PassResult want = run_pass(*cpu, f.inputs());
    EXPECT_EQ(fused_attention_calls().forward, before.forward) << "the CPU table has no fused entry";
    const PassResult got = run_pass(*staged, f.inputs());
    EXPECT_EQ(fused_attention_calls().forward - before.forward, layers);
    EXPECT_EQ(fused_attention_calls().backward - before.backward, layers);
    expect_same(got, want);
}

TEST_P(FusedAttentionPath, ARowWithNoKeyTakesTheUnfusedEntries) {
    const Fixture f(GetParam());
    auto cpu = f.load_model();
    auto staged = f.load_model(ParamDevice{&test_backend("staged")});
    ModelInputs in = f.inputs();
    ASSERT_GE(in.B, 2);
    // Sample 0 sees no key: wholly padded (bidirectional), or its first token
    // padded (causal: query 0 sees only key 0).
    std::vector<int64_t> mask(size_t(in.B * in.T), 1);
    if (in.attention_mask) mask.assign(in.attention_mask, in.attention_mask + in.B * in.T);
    const bool causal = f.config.task == Task::causal_lm;
    for (int64_t t = 0; t < (causal ? 1 : in.T); ++t) mask[size_t(t)] = 0;
    ModelInputs holed = in;
    holed.attention_mask = mask.data();
    ASSERT_FALSE(attention_every_row_has_a_key(mask.data(), in.B, in.T, causal));

    FusedAttentionCalls c0 = fused_attention_calls();
    expect_same(run_pass(*staged, holed), run_pass(*cpu, holed));
    EXPECT_EQ(fused_attention_calls().forward, c0.forward);
    EXPECT_EQ(fused_attention_calls().backward, c0.backward);

    // The next ordinary batch is fused again.
    c0 = fused_attention_calls();
    expect_same(run_pass(*staged, in), run_pass(*cpu, in));
    EXPECT_GT(fused_attention_calls().forward, c0.forward);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FusedAttentionPath,
                         ::testing::Values("bert-mlm", "gpt2-lm", "distilbert-cls"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                             std::string n = p.param;
                             for (char& ch : n)
                                 if (ch == '-') ch = '_';
                             return n;
                         });

}  // namespace
}  // namespace loom::test
