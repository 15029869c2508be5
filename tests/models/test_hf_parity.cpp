// Every bundled Hugging Face fixture against Loom: logits (or start/end
// logits), loss, every hidden state, every parameter gradient by HF name, and
// the parameters after one AdamW step, both from the stored gradients
// (optimizer alone) and from Loom's own gradients (end to end), within the
// manifest's suggested tolerances. Every test runs on each test backend
// (tests/test_backends.h): the staged one reaches the parameters only through
// uploads and downloads, its host copies poisoned in between.
#include <gtest/gtest.h>

#include <cstring>
#include <tuple>

#include "hf_fixture.h"
#include "optim/adamw.h"
#include "test_backends.h"

namespace loom::test {
namespace {

class HfParity : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
  protected:
    void SetUp() override {
        const std::string absent = backend_absent_reason(std::get<1>(GetParam()));
        if (!absent.empty()) GTEST_SKIP() << absent;
        fx_ = std::make_unique<Fixture>(std::get<0>(GetParam()));
        // A Llama-family model on a table without its kernels refuses to
        // build (LlamaRefusesATableWithoutItsKernels holds that).
        const NnOps& nn = *test_backend(std::get<1>(GetParam())).ops().nn;
        if (fx_->config.llama_like() &&
            (!nn.decoder_supported() || (fx_->config.sliding_window >= 0 && !nn.attention_window)))
            GTEST_SKIP() << std::get<1>(GetParam()) << " has no " << fx_->config.architecture
                         << " kernels yet";
    }
    // The fixture's model on this test's backend, its host copies poisoned.
    std::unique_ptr<Model> load_model() const {
        auto m = fx_->load_model(ParamDevice{&test_backend(std::get<1>(GetParam()))});
        poison_host_copies(m->params());
        return m;
    }
    std::unique_ptr<Fixture> fx_;
};

// The fixture set is discovered from the folder; make sure it is all there,
// so a missing data directory cannot pass vacuously.
TEST(HfFixtures, AllThirteenPresent) {
    const std::vector<std::string> want = {
        "albert-cls",     "albert-mlm",     "bert-cls",   "bert-mlm",  "bert-qa",
        "distilbert-cls", "distilbert-mlm", "gpt2-lm",    "llama-cls", "llama-lm",
        "mistral-lm",     "qwen2-lm",       "roberta-cls"};
    const auto have = hf_fixture_names();
    for (const auto& w : want)
        EXPECT_NE(std::find(have.begin(), have.end(), w), have.end()) << "missing fixture " << w;
}

TEST_P(HfParity, ForwardLogitsLossHiddenStates) {
    const Fixture& f = *fx_;
    auto model = load_model();
    const LossSum loss = model->forward(f.inputs(), DropoutPlan{});
    const auto out = model->outputs();

    int checked = 0;
    for (const char* key : {"logits", "start_logits", "end_logits"}) {
        if (!f.expected.count(key)) continue;
        ASSERT_TRUE(out.count(key)) << "model gave no " << key;
        EXPECT_TRUE(close(key, out.at(key), f.expected.at(key), f.tol("logits")));
        ++checked;
    }
    EXPECT_GE(checked, 1);

    const float ref_loss = f.expected.at("loss").data<float>()[0];
    ASSERT_GT(loss.count, 0);
    const float got = float(loss.mean());
    EXPECT_TRUE(close("loss", &got, &ref_loss, 1, f.tol("loss")));

    int hidden = 0;
    for (const auto& [k, ref] : f.expected)
        if (k.rfind("hidden_states.", 0) == 0) ++hidden;
    EXPECT_EQ(model->num_hidden_states(), hidden);
    for (int i = 0; i < hidden; ++i) {
        const std::string k = "hidden_states." + std::to_string(i);
        EXPECT_TRUE(close(k, model->hidden_state(i), f.expected.at(k), f.tol("hidden_states")));
    }
}

TEST_P(HfParity, BackwardEveryGradientByName) {
    const Fixture& f = *fx_;
    auto model = load_model();
    model->zero_grad();
    const LossSum loss = model->forward(f.inputs(), DropoutPlan{});
    model->backward(1.0 / double(loss.count));

    ParamTable& t = model->params();
    t.download_grads();
    const auto noise = f.noise_level_grads();
    const auto tied = f.tied_targets();
    const Tol tol = f.tol("grad");
    int n_grads = 0;
    for (const auto& [k, ref] : f.expected) {
        if (k.rfind("grad.", 0) != 0) continue;
        ++n_grads;
        const std::string name = k.substr(5);
        const int row = t.find(name);
        ASSERT_GE(row, 0) << "no parameter " << name;
        EXPECT_EQ(t.row(row).name, name) << "gradient keyed by an alias";
        // Noise-level and tied gradients: atol only (README).
        const Tol use = (noise.count(name) || tied.count(name)) ? Tol{tol.atol, 0.0} : tol;
        EXPECT_TRUE(close(k, t.grad_tensor(row), ref, use));
    }
    // Every stored parameter has a reference gradient and vice versa.
    EXPECT_EQ(n_grads, t.size());
    EXPECT_EQ(t.num_parameters(), f.manifest.at("num_parameters").get<int64_t>());
}

// (a) The optimizer alone: AdamW on the stored HF gradients.
TEST_P(HfParity, AdamWFromStoredGradients) {
    const Fixture& f = *fx_;
    auto model = load_model();
    ParamTable& t = model->params();
    model->zero_grad();
    for (int i = 0; i < t.size(); ++i) {
        const Tensor& g = f.expected.at("grad." + t.row(i).name);
        ASSERT_EQ(g.shape, t.row(i).shape);
        t.backend().to_device(t.device_grad(i), g.raw(), g.nbytes());
    }
    AdamW opt(t, AdamWParams{1e-3, 0.9, 0.999, 1e-8, 0.01}, DecayPolicy::all);
    opt.step();
    t.download_params();
    ASSERT_EQ(int(f.after.size()), t.size());
    for (int i = 0; i < t.size(); ++i) {
        const std::string& name = t.row(i).name;
        EXPECT_TRUE(close("after." + name, t.param_tensor(i), f.after.at(name),
                          f.tol("after_adamw_from_stored_grads")));
    }
}

// (b) End to end: Loom's gradients, then AdamW. atol 1e-4 where the stored
// |g| >= 1e-6, 2e-3 elsewhere (rounding noise decides those updates).
TEST_P(HfParity, AdamWEndToEnd) {
    const Fixture& f = *fx_;
    auto model = load_model();
    ParamTable& t = model->params();
    model->zero_grad();
    const LossSum loss = model->forward(f.inputs(), DropoutPlan{});
    model->backward(1.0 / double(loss.count));
    AdamW opt(t, AdamWParams{1e-3, 0.9, 0.999, 1e-8, 0.01}, DecayPolicy::all);
    opt.step();
    t.download_params();

    const auto& e2e = f.manifest.at("suggested_tolerances").at("after_adamw_end_to_end");
    const double atol = e2e.at("atol"), atol_else = e2e.at("atol_elsewhere");
    const double threshold = e2e.at("only_where_abs_grad_ge");
    for (int i = 0; i < t.size(); ++i) {
        const std::string& name = t.row(i).name;
        const Tensor& g = f.expected.at("grad." + name);
        std::vector<double> atol_of(size_t(g.numel()));
        for (int64_t k = 0; k < g.numel(); ++k)
            atol_of[size_t(k)] = std::fabs(g.data<float>()[k]) >= threshold ? atol : atol_else;
        const Tensor p = t.param_tensor(i);
        EXPECT_TRUE(close("after." + name, p.data<float>(), f.after.at(name).data<float>(),
                          p.numel(), Tol{atol, 0.0}, &atol_of));
    }
}

// Same results whatever the batch composition: forward twice (activation
// buffers reused) and with a second model instance.
TEST_P(HfParity, RepeatedForwardIsBitwiseStable) {
    const Fixture& f = *fx_;
    auto model = load_model();
    const LossSum a = model->forward(f.inputs(), DropoutPlan{});
    const Tensor first = model->hidden_state(model->num_hidden_states() - 1).clone();
    const LossSum b = model->forward(f.inputs(), DropoutPlan{});
    const Tensor second = model->hidden_state(model->num_hidden_states() - 1);
    EXPECT_EQ(a.sum, b.sum);
    EXPECT_EQ(0, std::memcmp(first.raw(), second.raw(), first.nbytes()));
}

// "bert_cls_cpu", "bert_cls_staged", ...
std::string parity_test_name(
    const ::testing::TestParamInfo<std::tuple<std::string, std::string>>& info) {
    std::string s = std::get<0>(info.param) + "_" + std::get<1>(info.param);
    for (char& c : s)
        if (c == '-') c = '_';
    return s;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfParity,
                         ::testing::Combine(::testing::ValuesIn(hf_fixture_names()),
                                            ::testing::ValuesIn(test_backend_names())),
                         parity_test_name);

}  // namespace
}  // namespace loom::test
