// Masked LM, causal LM and extractive QA end to end on tiny data: the loss
// falls, the task's metrics are reported, and the export has the right head.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "io/file_utils.h"
#include "trainer_e2e_util.h"

namespace loom::test {
namespace {

class TrainerTasks : public TrainDir {};

std::string architecture(const std::string& dir) {
    return nlohmann::json::parse(read_file(dir + "/config.json"))["architectures"][0];
}

TEST_F(TrainerTasks, MaskedLmLossFallsAndReportsPerplexity) {
    Trainer tr(job(job_text("masked-lm", "out", "  max_steps: 30\n  warmup_steps: 3\n")), quiet());
    const EvalOutput before = tr.evaluate();
    const TrainResult r = tr.train();
    ASSERT_EQ(r.step_losses.size(), 30u);
    // Starts near ln(V) = ln 5859 = 8.68 and must learn the small vocabulary.
    EXPECT_NEAR(r.step_losses[0], std::log(5859.0), 0.5);
    EXPECT_LT(mean(r.step_losses, 25, 30), r.step_losses[0] - 2.0);
    const EvalOutput ev = tr.evaluate();
    EXPECT_LT(ev.metric("loss"), before.metric("loss") - 2.0);
    EXPECT_GT(ev.metric("accuracy"), before.metric("accuracy"));
    EXPECT_NEAR(ev.metric("perplexity"), std::exp(ev.metric("loss")),
                1e-6 * ev.metric("perplexity"));
    EXPECT_GT(ev.metric("accuracy"), 0.0);
    EXPECT_EQ(architecture(path("out")), "BertForMaskedLM");
}

TEST_F(TrainerTasks, CausalLmLossFallsAndReportsPerplexity) {
    Trainer tr(job(job_text("causal-lm", "out", "  max_steps: 30\n  warmup_steps: 3\n")), quiet());
    const EvalOutput before = tr.evaluate();
    const TrainResult r = tr.train();
    ASSERT_EQ(r.step_losses.size(), 30u);
    EXPECT_NEAR(r.step_losses[0], std::log(2000.0), 0.5);
    EXPECT_LT(mean(r.step_losses, 25, 30), r.step_losses[0] - 2.0);
    const EvalOutput ev = tr.evaluate();
    EXPECT_LT(ev.metric("loss"), before.metric("loss") - 2.0);
    EXPECT_NEAR(ev.metric("perplexity"), std::exp(ev.metric("loss")),
                1e-6 * ev.metric("perplexity"));
    EXPECT_GT(ev.metric("accuracy"), before.metric("accuracy") + 0.05);
    EXPECT_EQ(architecture(path("out")), "GPT2LMHeadModel");
}

TEST_F(TrainerTasks, QuestionAnsweringLearnsTheSpan) {
    Trainer tr(
        job(job_text("question-answering", "out", "  num_train_epochs: 8\n  warmup_steps: 4\n")),
        quiet());
    const EvalOutput before = tr.evaluate();
    const TrainResult r = tr.train();
    EXPECT_LT(mean(r.step_losses, r.step_losses.size() - 5, r.step_losses.size()),
              mean(r.step_losses, 0, 5) - 1.0);
    const EvalOutput ev = tr.evaluate(true);
    EXPECT_LT(ev.metric("loss"), before.metric("loss") - 1.0);
    // The answer is always the word after "named": a learnable rule.
    EXPECT_GT(ev.metric("exact_match"), before.metric("exact_match") + 30.0);
    ASSERT_EQ(ev.qa_predictions.size(), 24u);
    EXPECT_GE(ev.metric("exact_match"), 0.0);
    EXPECT_LE(ev.metric("exact_match"), 100.0);
    EXPECT_GE(ev.metric("f1"), ev.metric("exact_match"));
    // Each prediction is a span of its own context.
    for (size_t i = 0; i < ev.qa_predictions.size(); ++i) {
        const QaPrediction& p = ev.qa_predictions[i];
        const std::string& ctx = tr.eval_data()->examples[i].context;
        if (p.start_byte < 0) continue;
        EXPECT_EQ(ctx.substr(size_t(p.start_byte), size_t(p.end_byte - p.start_byte)), p.text);
    }
    EXPECT_EQ(architecture(path("out")), "BertForQuestionAnswering");
}

}  // namespace
}  // namespace loom::test
