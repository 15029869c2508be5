// Checkpoints in a training run: an interrupted and resumed run repeats the
// uninterrupted run's per-step losses exactly; rotation keeps the best
// checkpoint; a corrupt checkpoint is a clear error; early stopping stops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "io/file_utils.h"
#include "io/safetensors.h"
#include "trainer_e2e_util.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;

class TrainerResume : public TrainDir {
  protected:
    // A classifier job without eval, with `extra` hyperparameters.
    Job cls_job(const std::string& extra, const std::string& out,
                const std::vector<std::string>& overrides = {}) const {
        Job j = job(job_text("sequence-classification", out, extra), overrides);
        j.data.eval.clear();
        return j;
    }
    // Trains `extra` uninterrupted ("full"), then interrupted at `stop` and
    // resumed ("split"); expects the same per-step losses and parameters.
    // Returns the uninterrupted run's losses.
    std::vector<double> expect_exact_resume(const std::string& extra, int64_t stop) {
        Trainer full(cls_job(extra, "full"), quiet());
        const TrainResult a = full.train();
        TrainerOptions o = quiet();
        o.interrupt_at_step = stop;
        const TrainResult b = Trainer(cls_job(extra, "split"), o).train();
        EXPECT_EQ(b.global_step, stop);
        Trainer second(cls_job(extra, "split", {"hyperparameters.resume_from_checkpoint=latest"}),
                       quiet());
        const TrainResult c = second.train();
        std::vector<double> joined = b.step_losses;
        joined.insert(joined.end(), c.step_losses.begin(), c.step_losses.end());
        EXPECT_EQ(joined, a.step_losses);
        EXPECT_EQ(params_of(second), params_of(full));
        return a.step_losses;
    }
};

// Dropout on, gradient accumulation, a step count that crosses an epoch
// boundary with a short last group (192 / 16 = 12 batches, GA 5 -> 5, 5, 2),
// warmup and decay: everything the position and RNG state must carry.
TEST_F(TrainerResume, ResumedRunRepeatsTheUninterruptedLosses) {
    const std::string extra =
        "  per_device_train_batch_size: 8\n  gradient_accumulation_steps: 3\n  max_steps: 14\n"
        "  warmup_steps: 3\n  weight_decay: 0.01\n";
    auto make = [&](const std::string& out, const std::vector<std::string>& ov) {
        Job j = job(job_text("sequence-classification", out, extra), ov);
        j.data.eval.clear();
        return j;
    };
    Trainer full(make("full", {}), quiet());
    const TrainResult a = full.train();
    ASSERT_EQ(a.step_losses.size(), 14u);

    TrainerOptions o = quiet();
    o.interrupt_at_step = 9;
    Trainer first(make("split", {}), o);
    const TrainResult b = first.train();
    EXPECT_EQ(b.stop, StopReason::interrupted);
    ASSERT_EQ(b.global_step, 9);
    EXPECT_TRUE(fs::exists(path("split/checkpoint-9/loom_checkpoint.json")));
    EXPECT_FALSE(fs::exists(path("split/model.safetensors")));  // no export when interrupted

    Trainer second(make("split", {"hyperparameters.resume_from_checkpoint=latest"}), quiet());
    EXPECT_EQ(second.state().global_step, 9);
    const TrainResult c = second.train();
    EXPECT_EQ(c.start_step, 9);
    ASSERT_EQ(c.global_step, 14);
    std::vector<double> joined = b.step_losses;
    joined.insert(joined.end(), c.step_losses.begin(), c.step_losses.end());
    ASSERT_EQ(joined.size(), a.step_losses.size());
    for (size_t i = 0; i < joined.size(); ++i)
        EXPECT_EQ(joined[i], a.step_losses[i]) << "step " << i + 1;
    EXPECT_EQ(params_of(second), params_of(full));

    // metrics.jsonl of the resumed run has each step once.
    int lines = 0;
    std::ifstream in(path("split/metrics.jsonl"));
    for (std::string l; std::getline(in, l);)
        if (l.find("\"loss\"") != std::string::npos) ++lines;
    EXPECT_EQ(lines, 14);
}

// LAMB steps are relative to each tensor's norm (trust ratio), so its
// learning rates run larger than AdamW's for the same progress.
TEST_F(TrainerResume, LambLearnsTheTask) {
    Trainer tr(job(job_text("sequence-classification", "out",
                            "  num_train_epochs: 8\n  warmup_steps: 4\n  optim: lamb\n"
                            "  learning_rate: 5.0e-2\n")),
               quiet());
    const TrainResult r = tr.train();
    ASSERT_EQ(r.step_losses.size(), 96u);
    EXPECT_LT(mean(r.step_losses, 88, 96), mean(r.step_losses, 0, 8) - 0.3);
}

TEST_F(TrainerResume, LambTrainsAndResumesExactly) {
    const std::string extra =
        "  per_device_train_batch_size: 8\n  max_steps: 10\n  learning_rate: 2.0e-2\n"
        "  warmup_steps: 2\n  weight_decay: 0.01\n  optim: lamb\n";
    const std::vector<double> lamb = expect_exact_resume(extra, 6);
    ASSERT_EQ(lamb.size(), 10u);
    // The checkpoint says which optimizer wrote it.
    std::ifstream meta(path("split/checkpoint-6/optimizer.safetensors"), std::ios::binary);
    std::string head(4096, '\0');
    meta.read(head.data(), std::streamsize(head.size()));
    EXPECT_NE(head.find("\"optimizer\":\"lamb\""), std::string::npos);
    // Not AdamW under another name: the same job with adamw takes other steps.
    const TrainResult w =
        Trainer(cls_job(extra, "adamw", {"hyperparameters.optim=adamw"}), quiet()).train();
    EXPECT_NE(w.step_losses[2], lamb[2]);
}

// Plain SGD needs a far larger rate than AdamW on this tiny model.
TEST_F(TrainerResume, SgdLearnsAndResumesExactly) {
    const std::vector<double> sgd = expect_exact_resume(
        "  per_device_train_batch_size: 16\n  max_steps: 48\n  optim: sgd\n"
        "  learning_rate: 3.0\n  weight_decay: 0.01\n",
        20);
    ASSERT_EQ(sgd.size(), 48u);
    EXPECT_LT(mean(sgd, 40, 48), mean(sgd, 0, 8) - 0.2);
}

TEST_F(TrainerResume, CorruptCheckpointIsAClearError) {
    TrainerOptions o = quiet();
    o.interrupt_at_step = 2;
    const std::string text = job_text("sequence-classification", "out", "  max_steps: 4\n");
    Trainer(job(text), o).train();
    const std::string ckpt = path("out/checkpoint-2");
    ASSERT_TRUE(fs::exists(ckpt));
    // Flips one byte in the middle of the weights (twice restores them).
    const auto flip = [&] {
        std::fstream f(ckpt + "/model.safetensors",
                       std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(0, std::ios::end);
        const auto n = f.tellg();
        char c = 0;
        f.seekg(n / 2);
        f.read(&c, 1);
        c = char(c ^ 0x40);
        f.seekp(n / 2);
        f.write(&c, 1);
    };
    flip();
    expect_train_error(
        [&] { Trainer(job(text, {"hyperparameters.resume_from_checkpoint=latest"}), quiet()); },
        {"checkpoint", "model.safetensors", "corrupt"});
    flip();
    // A truncated file says so.
    fs::resize_file(ckpt + "/optimizer.safetensors", 100);
    expect_train_error(
        [&] { Trainer(job(text, {"hyperparameters.resume_from_checkpoint=" + ckpt}), quiet()); },
        {"optimizer.safetensors"});
    // No manifest: a named checkpoint is an error, never a fresh start;
    // `latest` passes over the unfinished folder (test_trainer_restart.cpp).
    fs::remove(ckpt + "/loom_checkpoint.json");
    expect_train_error(
        [&] { Trainer(job(text, {"hyperparameters.resume_from_checkpoint=" + ckpt}), quiet()); },
        {"loom_checkpoint.json", "missing"});
    EXPECT_EQ(Trainer(job(text, {"hyperparameters.resume_from_checkpoint=latest"}), quiet())
                  .state()
                  .global_step,
              0);
}

// eval and save every 3 steps, keep 1: the best (by accuracy) and the newest
// survive; load_best_model_at_end exports the best one's weights.
TEST_F(TrainerResume, RotationKeepsTheBestAndLoadsItAtTheEnd) {
    const std::string extra =
        "  max_steps: 12\n  eval_strategy: steps\n  eval_steps: 3\n  save_strategy: steps\n"
        "  save_steps: 3\n  save_total_limit: 1\n  load_best_model_at_end: true\n"
        "  metric_for_best_model: loss\n";
    // A learning rate so high that the eval loss gets worse after a while.
    Trainer tr(job(job_text("sequence-classification", "out", extra),
                   {"hyperparameters.learning_rate=0.05"}),
               quiet());
    const TrainResult r = tr.train();
    ASSERT_EQ(r.global_step, 12);
    // Find the best eval step from the log history.
    int64_t best_step = -1;
    double best = 1e30;
    for (const auto& e : tr.state().log_history)
        if (e.contains("eval_loss") && e["eval_loss"].get<double>() < best) {
            best = e["eval_loss"].get<double>();
            best_step = e["step"].get<int64_t>();
        }
    ASSERT_GT(best_step, 0);
    EXPECT_EQ(r.best_checkpoint, "checkpoint-" + std::to_string(best_step));
    const auto left = list_checkpoints(path("out"));
    std::vector<int64_t> steps;
    for (const auto& c : left) steps.push_back(c.step);
    if (best_step == 12)
        EXPECT_EQ(steps, std::vector<int64_t>({12}));
    else
        EXPECT_EQ(steps, std::vector<int64_t>({best_step, 12}));
    // The exported model is the best checkpoint's.
    const auto exported = SafetensorsFile::open(path("out/model.safetensors"));
    const auto saved = SafetensorsFile::open(
        path("out/checkpoint-" + std::to_string(best_step) + "/model.safetensors"));
    for (const auto& n : saved.names()) {
        const Tensor a = exported.get(n), b = saved.get(n);
        ASSERT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes())) << n;
    }
    const auto cfg = nlohmann::json::parse(read_file(path("out/trainer_state.json")));
    EXPECT_EQ(cfg["best_model_checkpoint"], "checkpoint-" + std::to_string(best_step));
}

TEST_F(TrainerResume, EarlyStoppingStopsAfterPatienceEvaluations) {
    // With an absurd threshold no evaluation counts as an improvement after
    // the first, so patience 2 stops at the third evaluation.
    const std::string extra =
        "  max_steps: 40\n  eval_strategy: steps\n  eval_steps: 2\n  save_strategy: steps\n"
        "  save_steps: 2\n  load_best_model_at_end: true\n  early_stopping_patience: 2\n"
        "  early_stopping_threshold: 100\n";
    Trainer tr(job(job_text("sequence-classification", "out", extra)), quiet());
    const TrainResult r = tr.train();
    EXPECT_EQ(r.stop, StopReason::early_stopped);
    EXPECT_EQ(r.global_step, 6);
    EXPECT_EQ(r.best_checkpoint, "checkpoint-2");
    EXPECT_TRUE(fs::exists(path("out/model.safetensors")));
}

}  // namespace
}  // namespace loom::test
