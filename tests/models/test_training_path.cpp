// The training path with dropout on (every fixture has p = 0, so this is the
// only place masks are exercised end to end):
// - the same (seed, step) reproduces the loss bitwise, another step changes it;
// - splitting a batch into two micro-batches with sample_offset gives the same
//   per-sample outputs as the whole batch, and gradients accumulated with the
//   global count equal the whole batch's (gradient accumulation = larger batch);
// - backward through the masks matches a finite-difference directional
//   derivative of the loss (the mask is recomputed, not stored).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "hf_fixture.h"

namespace loom::test {
namespace {

ModelConfig with_dropout(ModelConfig c, double p) {
    c.hidden_dropout = c.embedding_dropout = c.attention_dropout = c.classifier_dropout = p;
    c.qa_dropout = p;
    return c;
}

DropoutPlan training(uint64_t seed, uint64_t step, int64_t offset = 0) {
    DropoutPlan d;
    d.training = true;
    d.seed = seed;
    d.step = step;
    d.sample_offset = offset;
    return d;
}

// Rows [b0, b1) of every per-sample tensor of the inputs.
struct SubBatch {
    std::vector<int64_t> ids, mask, types, labels, starts, ends;
    ModelInputs in;
    SubBatch(const ModelInputs& full, int64_t b0, int64_t b1, bool per_sample_labels) {
        const int64_t T = full.T;
        auto rows = [&](const int64_t* p, int64_t w, std::vector<int64_t>& v) -> const int64_t* {
            if (!p) return nullptr;
            v.assign(p + b0 * w, p + b1 * w);
            return v.data();
        };
        in.B = b1 - b0;
        in.T = T;
        in.input_ids = rows(full.input_ids, T, ids);
        in.attention_mask = rows(full.attention_mask, T, mask);
        in.token_type_ids = rows(full.token_type_ids, T, types);
        in.labels = rows(full.labels, per_sample_labels ? 1 : T, labels);
        in.start_positions = rows(full.start_positions, 1, starts);
        in.end_positions = rows(full.end_positions, 1, ends);
    }
};

class TrainingPath : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        fx_ = std::make_unique<Fixture>(GetParam());
        config_ = with_dropout(fx_->config, 0.1);
    }
    std::unique_ptr<Model> model() const {
        auto m = build_model(config_);
        m->load(SafetensorsFile::open(fx_->dir + "/model.safetensors"));
        return m;
    }
    std::unique_ptr<Fixture> fx_;
    ModelConfig config_;
};

TEST_P(TrainingPath, SameSeedAndStepReproduce) {
    auto m = model();
    const ModelInputs in = fx_->inputs();
    const LossSum a = m->forward(in, training(11, 5));
    const LossSum b = m->forward(in, training(11, 5));
    const LossSum c = m->forward(in, training(11, 6));
    const LossSum eval = m->forward(in, DropoutPlan{});
    EXPECT_EQ(a.sum, b.sum);
    EXPECT_NE(a.sum, c.sum);
    EXPECT_NE(a.sum, eval.sum);
    // Eval mode ignores the dropout probabilities: HF's reference loss.
    const float ref = fx_->expected.at("loss").data<float>()[0];
    EXPECT_NEAR(eval.mean(), ref, 1e-5);
}

TEST_P(TrainingPath, SplitBatchMatchesWholeBatch) {
    const ModelInputs full = fx_->inputs();
    ASSERT_GE(full.B, 2);
    const bool per_sample = config_.task == Task::sequence_classification;
    const auto drop = [](int64_t offset) { return training(3, 9, offset); };

    auto whole = model();
    whole->zero_grad();
    const LossSum lw = whole->forward(full, drop(0));
    whole->backward(1.0 / double(lw.count));
    const Tensor hw = whole->hidden_state(whole->num_hidden_states() - 1).clone();

    // Two micro-batches, normalised by the global count, grads accumulating.
    auto split = model();
    split->zero_grad();
    const int64_t cut = 1;
    SubBatch s1(full, 0, cut, per_sample), s2(full, cut, full.B, per_sample);
    const LossSum l1 = split->forward(s1.in, drop(0));
    const Tensor h1 = split->hidden_state(split->num_hidden_states() - 1).clone();
    split->backward(1.0 / double(lw.count));
    const LossSum l2 = split->forward(s2.in, drop(cut));
    const Tensor h2 = split->hidden_state(split->num_hidden_states() - 1).clone();
    split->backward(1.0 / double(lw.count));

    EXPECT_EQ(l1.count + l2.count, lw.count);
    EXPECT_NEAR(l1.sum + l2.sum, lw.sum, 1e-5 * std::max(1.0, std::fabs(lw.sum)));
    const int64_t per_row = hw.numel() / full.B;
    EXPECT_TRUE(
        close("hidden rows [0, 1)", h1.data<float>(), hw.data<float>(), per_row, Tol{1e-5, 1e-5}));
    EXPECT_TRUE(close("hidden rows [1, B)", h2.data<float>(), hw.data<float>() + per_row,
                      (full.B - cut) * per_row, Tol{1e-5, 1e-5}));
    const ParamTable& tw = whole->params();
    const ParamTable& ts = split->params();
    for (int i = 0; i < tw.size(); ++i)
        EXPECT_TRUE(close("accumulated grad." + tw.row(i).name, ts.grad(i), tw.grad(i),
                          tw.row(i).numel(), Tol{1e-6, 1e-4}));
}

// d/de L(theta + e * g/|g|) at 0 equals |g|, with the same dropout masks.
TEST_P(TrainingPath, GradientMatchesFiniteDifferenceUnderDropout) {
    auto m = model();
    ParamTable& t = m->params();
    const ModelInputs in = fx_->inputs();
    const DropoutPlan drop = training(5, 1);
    m->zero_grad();
    const LossSum l0 = m->forward(in, drop);
    m->backward(1.0 / double(l0.count));

    const int64_t n = t.flat_numel();
    std::vector<float> theta(t.params_data(), t.params_data() + n);
    std::vector<double> dir(static_cast<size_t>(n), 0.0);
    double norm = 0;
    for (int64_t i = 0; i < n; ++i) norm += double(t.grads_data()[i]) * t.grads_data()[i];
    norm = std::sqrt(norm);
    ASSERT_GT(norm, 0);
    for (int64_t i = 0; i < n; ++i) dir[size_t(i)] = t.grads_data()[i] / norm;

    const double eps = 1e-3;
    auto loss_at = [&](double e) {
        for (int64_t i = 0; i < n; ++i)
            t.params_data()[i] = float(theta[size_t(i)] + e * dir[size_t(i)]);
        return m->forward(in, drop).mean();
    };
    const double numeric = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
    EXPECT_NEAR(numeric, norm, 2e-2 * norm) << "analytic |g| " << norm << ", numeric " << numeric;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TrainingPath,
                         ::testing::Values("bert-mlm", "bert-qa", "roberta-cls", "distilbert-cls",
                                           "albert-cls", "gpt2-lm"),
                         fixture_test_name);

}  // namespace
}  // namespace loom::test
