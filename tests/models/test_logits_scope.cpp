// LogitsScope::labelled_positions: the masked-LM head run on labelled rows only
// gives the same loss, the same gradients, and the same logits at those rows
// as the full HF-style computation. Under it the last (post-LN) layer runs at
// the rows the head reads (token 0 for classification, the labelled positions
// for masked LM): the same loss, logits and gradients as the whole layer, with
// dropout and padding, and with activation checkpointing bit for bit.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "hf_fixture.h"

namespace loom::test {
namespace {

class LogitsScopeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LogitsScopeTest, LabelledRowsOnlyMatchFullHead) {
    const Fixture f(GetParam());
    auto full = f.load_model();
    auto sparse = f.load_model();
    sparse->set_logits_scope(LogitsScope::labelled_positions);
    full->zero_grad();
    sparse->zero_grad();
    const LossSum lf = full->forward(f.inputs(), DropoutPlan{});
    const LossSum ls = sparse->forward(f.inputs(), DropoutPlan{});
    EXPECT_EQ(lf.count, ls.count);
    EXPECT_NEAR(lf.sum, ls.sum, 1e-5 * lf.sum);
    // Against HF too.
    EXPECT_NEAR(ls.mean(), f.expected.at("loss").data<float>()[0], 1e-5);

    const auto of = full->outputs();
    const auto os = sparse->outputs();
    ASSERT_TRUE(os.count("labelled_logits"));
    EXPECT_FALSE(os.count("logits"));
    const Tensor& logits = of.at("logits");  // (B, T, V)
    const Tensor& picked = os.at("labelled_logits");
    const int64_t V = logits.shape[2];
    ASSERT_EQ(picked.shape, (Shape{lf.count, V}));
    const Tensor& labels = f.batch.require("labels");
    int64_t m = 0;
    for (int64_t i = 0; i < labels.numel(); ++i) {
        if (labels.data<int64_t>()[i] == -100) continue;
        EXPECT_TRUE(close("labelled row " + std::to_string(m), picked.data<float>() + m * V,
                          logits.data<float>() + i * V, V, Tol{1e-5, 1e-5}));
        ++m;
    }
    EXPECT_EQ(m, lf.count);

    full->backward(1.0 / double(lf.count));
    sparse->backward(1.0 / double(ls.count));
    const ParamTable& t = full->params();
    for (int i = 0; i < t.size(); ++i)
        EXPECT_TRUE(close("grad." + t.row(i).name, sparse->params().grad(i), t.grad(i),
                          t.row(i).numel(), Tol{1e-6, 1e-4}));
}

INSTANTIATE_TEST_SUITE_P(MaskedLm, LogitsScopeTest,
                         ::testing::Values("bert-mlm", "albert-mlm", "distilbert-mlm"),
                         fixture_test_name);

struct StepRun {
    LossSum loss;
    std::map<std::string, Tensor> outs;
    std::vector<float> grads;
};

StepRun run_step(Model& m, const ModelInputs& in, const DropoutPlan& drop) {
    StepRun r;
    m.zero_grad();
    r.loss = m.forward(in, drop);
    for (const auto& [k, v] : m.outputs()) r.outs[k] = v.clone();
    EXPECT_GT(r.loss.count, 0);
    m.backward(1.0 / double(r.loss.count));
    const ParamTable& t = m.params();
    r.grads.assign(t.grads_data(), t.grads_data() + t.flat_numel());
    return r;
}

class LastLayerRowsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LastLayerRowsTest, MatchesTheWholeLayer) {
    const Fixture f(GetParam());
    const bool cls = f.config.task == Task::sequence_classification;
    const int L = f.config.num_hidden_layers;
    const std::string last = "hidden_states." + std::to_string(L);
    for (const bool dropout : {false, true}) {
        SCOPED_TRACE(dropout ? "dropout 0.2" : "no dropout");
        ModelConfig c = f.config;
        DropoutPlan drop;
        if (dropout) {
            c.hidden_dropout = c.embedding_dropout = c.attention_dropout = 0.2;
            drop.training = true;
            drop.seed = 77;
            drop.step = 5;
        }
        auto whole = build_model(c);
        auto rows = build_model(c);
        whole->init(13);
        rows->init(13);
        rows->set_logits_scope(LogitsScope::labelled_positions);
        const ModelInputs in = f.inputs();
        const StepRun w = run_step(*whole, in, drop);
        const StepRun r = run_step(*rows, in, drop);

        // The rows path ran: its last layer has no whole output to offer,
        // while every hidden state below it is the same computation.
        ASSERT_TRUE(w.outs.count(last));
        EXPECT_FALSE(r.outs.count(last));
        for (int i = 0; i < L; ++i) {
            const std::string k = "hidden_states." + std::to_string(i);
            ASSERT_TRUE(r.outs.count(k)) << k;
            EXPECT_TRUE(close(k, r.outs.at(k), w.outs.at(k), Tol{0, 0}));
        }
        EXPECT_EQ(r.loss.count, w.loss.count);
        EXPECT_NEAR(r.loss.sum, w.loss.sum, 1e-5 * std::abs(w.loss.sum));
        if (cls) {
            EXPECT_TRUE(close("logits", r.outs.at("logits"), w.outs.at("logits"), Tol{1e-5, 1e-5}));
        }
        const ParamTable& t = whole->params();
        for (int i = 0; i < t.size(); ++i) {
            if (!t.row(i).local) continue;
            const int64_t off = t.row(i).offset;
            EXPECT_TRUE(close("grad." + t.row(i).name, r.grads.data() + off, w.grads.data() + off,
                              t.row(i).numel(), Tol{1e-6, 1e-4}));
        }

        // Checkpointing recomputes the last layer at the same rows: bitwise.
        rows->set_activation_checkpointing(1);
        const StepRun ck = run_step(*rows, in, drop);
        rows->set_activation_checkpointing(0);
        EXPECT_EQ(ck.loss.sum, r.loss.sum);
        ASSERT_EQ(ck.grads.size(), r.grads.size());
        size_t mismatches = 0;
        for (size_t i = 0; i < ck.grads.size(); ++i) mismatches += ck.grads[i] != r.grads[i];
        EXPECT_EQ(mismatches, 0u);
    }
    // With HF's weights and no dropout, the loss is transformers' too.
    auto hf = f.load_model();
    hf->set_logits_scope(LogitsScope::labelled_positions);
    const LossSum l = hf->forward(f.inputs(), DropoutPlan{});
    EXPECT_NEAR(l.mean(), f.expected.at("loss").data<float>()[0], 1e-5);
    EXPECT_FALSE(hf->outputs().count(last));
}

INSTANTIATE_TEST_SUITE_P(HeadsReadingSomeRows, LastLayerRowsTest,
                         ::testing::Values("bert-cls", "roberta-cls", "distilbert-cls",
                                           "albert-cls", "bert-mlm", "albert-mlm",
                                           "distilbert-mlm"),
                         fixture_test_name);

// Heads that read every position (QA, causal LM) keep the whole last layer.
TEST(LastLayerRows, HeadsReadingEveryRowKeepTheWholeLayer) {
    for (const std::string name : {"bert-qa", "gpt2-lm"}) {
        SCOPED_TRACE(name);
        const Fixture f(name);
        auto m = f.load_model();
        m->set_logits_scope(LogitsScope::labelled_positions);
        m->forward(f.inputs(), DropoutPlan{});
        EXPECT_TRUE(
            m->outputs().count("hidden_states." + std::to_string(f.config.num_hidden_layers)));
    }
}

}  // namespace
}  // namespace loom::test
