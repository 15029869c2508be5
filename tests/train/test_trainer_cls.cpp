// Sequence classification end to end: the loss falls and eval accuracy beats
// chance, the exported HF folder reloads and reproduces the trainer's eval
// logits exactly, and gradient accumulation equals the larger batch.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "io/file_utils.h"
#include "io/safetensors.h"
#include "ops/gemm.h"
#include "trainer_e2e_util.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;

class TrainerCls : public TrainDir {};

TEST_F(TrainerCls, LossFallsAndExportReloadsWithTheSameLogits) {
    Trainer tr(job(job_text("sequence-classification", "out",
                            "  num_train_epochs: 8\n  warmup_steps: 4\n")),
               quiet());
    const double eval_loss_before = tr.evaluate().metric("loss");
    const TrainResult r = tr.train();
    ASSERT_EQ(r.global_step, 96);  // 192 examples / 16 x 8 epochs
    ASSERT_EQ(r.step_losses.size(), 96u);
    // Three classes start at ln 3; training must get well below, on the
    // training batches and on the held-out set.
    EXPECT_NEAR(r.step_losses[0], std::log(3.0), 0.15);
    EXPECT_LT(mean(r.step_losses, 88, 96), mean(r.step_losses, 0, 8) - 0.5);
    const EvalOutput ev = tr.evaluate(true);
    EXPECT_LT(ev.metric("loss"), eval_loss_before - 0.5);
    EXPECT_GT(ev.metric("accuracy"), 0.8);  // chance is about 1/3
    EXPECT_GE(ev.metric("f1"), 0.0);
    EXPECT_LE(ev.metric("f1"), 1.0);

    // The output folder is an HF folder with labels.
    const fs::path out = path("out");
    for (const char* f :
         {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
          "special_tokens_map.json", "metrics.jsonl", "report.html", "trainer_state.json"})
        EXPECT_TRUE(fs::exists(out / f)) << f;
    const auto cfg = nlohmann::json::parse(read_file((out / "config.json").string()));
    EXPECT_EQ(cfg["architectures"][0], "BertForSequenceClassification");
    EXPECT_EQ(cfg["id2label"]["0"], "animal");
    EXPECT_EQ(cfg["label2id"]["weather"], 2);
    bool has_events = false;
    for (const auto& e : fs::directory_iterator(out / "runs"))
        has_events |= e.path().filename().string().starts_with("events.out.tfevents.");
    EXPECT_TRUE(has_events);

    // Reload the export as `loom forward` does and run the eval batches.
    const ModelConfig c = load_hf_config(out.string());
    auto m = build_model(c);
    const LoadReport rep = m->load(SafetensorsFile::open((out / "model.safetensors").string()));
    EXPECT_TRUE(rep.newly_initialised.empty());
    LoaderOptions lo;
    lo.batch_size = 16;
    lo.shuffle = false;
    Loader loader(std::shared_ptr<const FeatureSet>(tr.eval_data(), [](const FeatureSet*) {}), lo);
    loader.seek({0, 0});
    TokenBatch b;
    int64_t checked = 0;
    while (loader.next(b)) {
        m->forward(b.inputs(), DropoutPlan{});
        const Tensor logits = m->outputs().at("logits");
        for (int64_t i = 0; i < b.B; ++i)
            for (int64_t k = 0; k < 3; ++k) {
                const float want = ev.logits[size_t(b.feature_index[size_t(i)] * 3 + k)];
                ASSERT_EQ(logits.data<float>()[i * 3 + k], want) << "row " << i << " class " << k;
                ++checked;
            }
    }
    EXPECT_EQ(checked, 48 * 3);
}

// Loss normalisation by the global label count: 2 micro-batches of 8 make
// the same update as one batch of 16. Dropout stays on (the configs say 0.1):
// masks are keyed by (seed, step, global sample) and rows are padded to the
// step's longest, so both splits draw the same masks and only the summation
// order differs.
TEST_F(TrainerCls, GradientAccumulationEqualsTheLargerBatch) {
    const std::string extra = "  max_steps: 6\n";
    auto run = [&](const std::string& out, int64_t bs, int64_t ga) {
        Job j = job(job_text("sequence-classification", out, extra),
                    {"hyperparameters.per_device_train_batch_size=" + std::to_string(bs),
                     "hyperparameters.gradient_accumulation_steps=" + std::to_string(ga)});
        j.data.eval.clear();
        Trainer tr(std::move(j), quiet());
        return tr.train().step_losses;
    };
    const auto a = run("a", 16, 1);
    const auto b = run("b", 8, 2);
    ASSERT_EQ(a.size(), 6u);
    ASSERT_EQ(b.size(), 6u);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 2e-5 * std::abs(a[i])) << i;
}

}  // namespace
}  // namespace loom::test

namespace loom::test {
namespace {

// hyperparameters.bf16: the loss curve follows the fp32 run within bf16's
// precision. A CPU without oneDNN bf16 kernels runs it as fp32 GEMMs and the
// run says so once at the start.
TEST_F(TrainDir, Bf16FollowsTheFp32LossCurve) {
    const std::string extra = "  max_steps: 10\n";
    const TrainResult a =
        Trainer(job(job_text("sequence-classification", "fp32", extra)), quiet()).train();
    std::FILE* f = std::tmpfile();
    TrainerOptions o = quiet();
    o.quiet = false;
    o.out = f;
    const TrainResult b =
        Trainer(job(job_text("sequence-classification", "bf16", extra + "  bf16: true\n")), o)
            .train();
    std::rewind(f);
    std::string printed;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) printed.append(buf, n);
    std::fclose(f);
    const std::string note = "bf16: this CPU has no bf16 GEMM kernels in oneDNN";
    const size_t at = printed.find(note);
    if (gemm_bf16_route() == Bf16Impl::widen_f32) {
        EXPECT_NE(at, std::string::npos) << printed;
        EXPECT_EQ(printed.find(note, at + 1), std::string::npos) << printed;
    } else {
        EXPECT_EQ(at, std::string::npos) << printed;
    }
    ASSERT_EQ(a.step_losses.size(), b.step_losses.size());
    bool differs = false;
    for (size_t i = 0; i < a.step_losses.size(); ++i) {
        EXPECT_NEAR(b.step_losses[i], a.step_losses[i], 0.03 * a.step_losses[i])
            << "step " << i + 1;
        differs |= b.step_losses[i] != a.step_losses[i];
    }
    EXPECT_TRUE(differs) << "bf16 changed nothing: is the flag wired?";
}

TEST_F(TrainDir, Fp16WithLossScalingFollowsTheFp32LossCurve) {
    const std::string extra = "  max_steps: 10\n  max_grad_norm: 1.0\n";
    const TrainResult a =
        Trainer(job(job_text("sequence-classification", "fp32", extra)), quiet()).train();
    const TrainResult b =
        Trainer(job(job_text("sequence-classification", "fp16", extra + "  fp16: true\n")), quiet())
            .train();
    ASSERT_EQ(a.step_losses.size(), b.step_losses.size());
    EXPECT_EQ(b.skipped_steps, 0);  // 2^16 overflows nothing here
    bool differs = false;
    for (size_t i = 0; i < a.step_losses.size(); ++i) {
        // fp16 keeps 11 significant bits, more than bf16's 8.
        EXPECT_NEAR(b.step_losses[i], a.step_losses[i], 0.01 * a.step_losses[i])
            << "step " << i + 1;
        differs |= b.step_losses[i] != a.step_losses[i];
    }
    EXPECT_TRUE(differs) << "fp16 changed nothing: is the flag wired?";
}

// A scale far too large overflows fp16 in backward: those steps must be
// skipped (parameters untouched, the scale halved) until the scale fits, and
// the scaler's state must resume exactly.
TEST_F(TrainDir, Fp16OverflowSkipsStepsAndBacksOff) {
    const std::string extra = "  max_steps: 16\n  fp16: true\n  warmup_steps: 2\n";
    TrainerOptions o = quiet();
    o.loss_scale.init_scale = std::ldexp(1.0, 32);

    Trainer one(
        job(job_text("sequence-classification", "one", extra), {"hyperparameters.max_steps=1"}), o);
    const auto before = params_of(one);
    EXPECT_EQ(one.train().skipped_steps, 1);
    EXPECT_EQ(params_of(one), before) << "a skipped step changed the parameters";

    Trainer big(job(job_text("sequence-classification", "big", extra)), o);
    const TrainResult r = big.train();
    ASSERT_EQ(r.global_step, 16);
    EXPECT_GT(r.skipped_steps, 1);
    EXPECT_LT(r.skipped_steps, 16);
    EXPECT_NE(params_of(big), before);
    for (double l : r.step_losses) EXPECT_TRUE(std::isfinite(l));

    TrainerOptions oi = o;
    oi.interrupt_at_step = 12;
    const TrainResult first =
        Trainer(job(job_text("sequence-classification", "split", extra)), oi).train();
    const auto j = nlohmann::json::parse(read_file(path("split/checkpoint-12/trainer_state.json")));
    const int64_t skipped = j["loom"]["loss_scale"]["skipped_steps"].get<int64_t>();
    EXPECT_GT(skipped, 1);
    // Halved once per skipped step; growth needs 2000 finite steps in a row.
    EXPECT_EQ(j["loom"]["loss_scale"]["scale"].get<double>(), std::ldexp(1.0, 32 - int(skipped)));
    Trainer second(job(job_text("sequence-classification", "split", extra),
                       {"hyperparameters.resume_from_checkpoint=latest"}),
                   o);
    const TrainResult rest = second.train();
    std::vector<double> joined = first.step_losses;
    joined.insert(joined.end(), rest.step_losses.begin(), rest.step_losses.end());
    ASSERT_EQ(joined.size(), r.step_losses.size());
    for (size_t i = 0; i < joined.size(); ++i)
        EXPECT_EQ(joined[i], r.step_losses[i]) << "step " << i + 1;
    EXPECT_EQ(rest.skipped_steps, r.skipped_steps);
    EXPECT_EQ(params_of(second), params_of(big));
}

}  // namespace
}  // namespace loom::test
