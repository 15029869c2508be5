// Restart semantics (train/trainer_restart.cpp): running the same job again
// continues its newest complete checkpoint with the uninterrupted run's
// losses; `latest` on a first run starts fresh; another job's checkpoint is
// refused naming each differing key and both values, while layout and run
// length changes resume; overwrite_output_dir clears the old run (and only
// once the new job has been set up); unfinished checkpoint folders are
// passed over; checkpoints without a job identity still resume.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "io/file_utils.h"
#include "train/log_jsonl.h"
#include "trainer_e2e_util.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class TrainerRestart : public TrainDir {
  protected:
    TrainerRestart() { eval_ = false; }

    // A 12-step classifier that saves every 4 steps; `extra` adds or
    // replaces hyperparameters.
    std::string text(const std::string& out, const std::string& extra = "") const {
        std::string hp = extra;
        for (const char* kv :
             {"  per_device_train_batch_size: 8\n", "  max_steps: 12\n", "  save_strategy: steps\n",
              "  save_steps: 4\n", "  warmup_steps: 2\n", "  disable_tqdm: true\n"}) {
            const std::string key = std::string(kv).substr(0, std::string(kv).find(':') + 1);
            if (extra.find(key) == std::string::npos) hp += kv;
        }
        return job_text("sequence-classification", out, hp);
    }

    struct Run {
        TrainResult result;
        std::string log;  // what the trainer printed
    };
    // Sets up and trains, keeping the messages; interrupt_at_step as the
    // trainer's test hook (SIGTERM during that step).
    static Run run(const Job& j, int64_t interrupt = -1) {
        TrainerOptions o = quiet();
        o.quiet = false;
        o.interrupt_at_step = interrupt;
        std::FILE* f = std::tmpfile();
        o.out = f;
        Run r;
        try {
            Trainer t(j, o);
            r.result = t.train();
        } catch (...) {
            std::fclose(f);
            throw;
        }
        std::fflush(f);
        std::rewind(f);
        char buf[4096];
        for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) r.log.append(buf, n);
        std::fclose(f);
        return r;
    }

    // The training losses metrics.jsonl records, in order.
    std::vector<double> logged_losses(const std::string& out) const {
        std::vector<double> v;
        for (const auto& e : read_metrics_jsonl(path(out + "/metrics.jsonl")))
            if (auto l = e.get("loss")) v.push_back(*l);
        return v;
    }
    int summaries(const std::string& out) const {
        int n = 0;
        for (const auto& e : read_metrics_jsonl(path(out + "/metrics.jsonl")))
            n += e.has("train_runtime") ? 1 : 0;
        return n;
    }
};

std::vector<double> joined(const TrainResult& a, const TrainResult& b) {
    std::vector<double> v = a.step_losses;
    v.insert(v.end(), b.step_losses.begin(), b.step_losses.end());
    return v;
}

void expect_in(const std::string& log, const std::string& piece) {
    EXPECT_NE(log.find(piece), std::string::npos) << "missing '" << piece << "' in:\n" << log;
}

TEST_F(TrainerRestart, SameJobRunTwiceContinuesWhereItStopped) {
    const Run full = run(job(text("full")));
    ASSERT_EQ(full.result.step_losses.size(), 12u);

    // Preempted during step 6 (SIGTERM: the step finishes and is saved).
    const Run first = run(job(text("split")), 6);
    expect_in(first.log, "starting fresh: no complete checkpoint in " + path("split"));
    ASSERT_EQ(first.result.global_step, 6);
    const json id = json::parse(read_file(path("split/checkpoint-6/job_identity.json")));
    EXPECT_EQ(id["fields"]["hyperparameters.global_train_batch_size"], "8");
    EXPECT_EQ(id["fields"]["hyperparameters.learning_rate"], "0.01");
    EXPECT_FALSE(id["fields"].contains("hyperparameters.output_dir"));

    // The restart runs the very same job.
    const Run second = run(job(text("split")));
    expect_in(second.log, "resuming from checkpoint-6 (found in output_dir; same job)");
    EXPECT_EQ(second.result.start_step, 6);
    EXPECT_EQ(second.result.global_step, 12);
    EXPECT_EQ(joined(first.result, second.result), full.result.step_losses);
    EXPECT_EQ(logged_losses("split"), logged_losses("full"));
    EXPECT_EQ(logged_losses("split").size(), 12u);

    // Once more after it finished: nothing left to train, the log unchanged.
    const Run third = run(job(text("split")));
    expect_in(third.log, "resuming from checkpoint-12 (found in output_dir; same job)");
    expect_in(third.log, "the run had already finished");
    EXPECT_TRUE(third.result.step_losses.empty());
    EXPECT_EQ(logged_losses("split"), logged_losses("full"));
    EXPECT_EQ(summaries("split"), 1);
}

TEST_F(TrainerRestart, LatestOnAFirstRunStartsFresh) {
    const Run r = run(
        job(text("out", "  max_steps: 2\n"), {"hyperparameters.resume_from_checkpoint=latest"}));
    expect_in(r.log, "starting fresh: no complete checkpoint in " + path("out"));
    EXPECT_EQ(r.result.start_step, 0);
    EXPECT_EQ(r.result.global_step, 2);
    // A path is a promise that the checkpoint is there.
    expect_train_error(
        [&] {
            job(text("out"),
                {"hyperparameters.resume_from_checkpoint=" + path("out/checkpoint-9")});
        },
        {"resume_from_checkpoint", "checkpoint-9", "not found"});
}

TEST_F(TrainerRestart, AnotherJobsCheckpointIsRefusedNamingWhatDiffers) {
    run(job(text("out", "  max_steps: 6\n")), 3);
    const std::string ckpt = path("out/checkpoint-3");
    ASSERT_TRUE(fs::exists(ckpt));
    const std::string hint = "resume_from_checkpoint: " + ckpt;
    auto refused = [&](const Job& j, const std::vector<std::string>& pieces) {
        std::vector<std::string> all = {
            "checkpoint-3 (found in output_dir) was written by a "
            "different job",
            "overwrite_output_dir", hint};
        all.insert(all.end(), pieces.begin(), pieces.end());
        expect_train_error([&] { Trainer(j, quiet()); }, all);
    };
    const std::string base = text("out", "  max_steps: 6\n");
    refused(job(base, {"hyperparameters.learning_rate=0.02"}),
            {"hyperparameters.learning_rate: 0.01 (checkpoint) vs 0.02 (this job)"});
    // `latest` is no licence to continue another job.
    refused(job(base, {"hyperparameters.learning_rate=0.02",
                       "hyperparameters.resume_from_checkpoint=latest"}),
            {"hyperparameters.learning_rate: 0.01 (checkpoint) vs 0.02 (this job)"});
    refused(job(base, {"hyperparameters.seed=7", "hyperparameters.weight_decay=0.1"}),
            {"hyperparameters.seed: 42 (checkpoint) vs 7 (this job)",
             "hyperparameters.weight_decay: 0 (checkpoint) vs 0.1 (this job)"});
    refused(job(base, {"hyperparameters.per_device_train_batch_size=4"}),
            {"hyperparameters.global_train_batch_size: 8 (checkpoint) vs 4 (this job)",
             "gradient_accumulation_steps"});
    // The checkpoint's data position counts micro-batches: another split of
    // the same global batch would read from elsewhere.
    refused(job(base, {"hyperparameters.per_device_train_batch_size=4",
                       "hyperparameters.gradient_accumulation_steps=2"}),
            {"hyperparameters.gradient_accumulation_steps: 1 (checkpoint) vs 2 (this job)"});
    refused(job(base, {"data.max_seq_length=24"}),
            {"data.max_seq_length: 32 (checkpoint) vs 24 (this job)"});
    const std::string other_config =
        write("other.json", read_file(data_path("train/tiny-bert.json")));
    refused(job(base, {"model.config=" + other_config}),
            {"model.config: " + data_path("train/tiny-bert.json") + " (checkpoint) vs " +
             other_config + " (this job)"});
    refused(job(job_text("masked-lm", "out",
                         "  max_steps: 6\n  per_device_train_batch_size: 8\n"
                         "  warmup_steps: 2\n")),
            {"task: sequence-classification (checkpoint) vs masked-lm (this job)",
             "data.train: " + data_path("train/cls_train.jsonl")});

    // Naming the checkpoint continues it with the new settings, listing them.
    const Run named = run(job(base, {"hyperparameters.learning_rate=0.02",
                                     "hyperparameters.resume_from_checkpoint=" + ckpt}));
    expect_in(named.log, "was written by a job with other settings");
    expect_in(named.log, "hyperparameters.learning_rate: 0.01 (checkpoint) vs 0.02 (this job)");
    EXPECT_EQ(named.result.start_step, 3);
    EXPECT_EQ(named.result.global_step, 6);
}

// The layout (here what one process can change of it: activation
// checkpointing, ZeRO, buckets), cadences and the run length are not part of
// a job's identity. (Another number of ranks: tests/cli/train_restart.sh.)
TEST_F(TrainerRestart, LayoutAndLengthChangesResume) {
    const Run full = run(job(text("full", "  max_steps: 6\n")));
    const Run first = run(job(text("split", "  max_steps: 6\n")), 3);
    const Run second =
        run(job(text("split", "  max_steps: 6\n  logging_steps: 2\n"),
                {"distribution.activation_checkpointing=true", "distribution.zero_stage=1",
                 "distribution.bucket_size_mb=1", "hyperparameters.save_steps=5"}));
    expect_in(second.log, "resuming from checkpoint-3 (found in output_dir; same job)");
    ASSERT_EQ(second.result.start_step, 3);
    EXPECT_EQ(joined(first.result, second.result), full.result.step_losses);

    // Extending the finished run: two more steps from its last checkpoint.
    const Run longer = run(job(text("split", "  max_steps: 8\n")));
    expect_in(longer.log, "resuming from checkpoint-6 (found in output_dir; same job)");
    expect_in(longer.log, "the checkpoint's run planned 6 steps, this job plans 8");
    EXPECT_EQ(longer.result.start_step, 6);
    EXPECT_EQ(longer.result.global_step, 8);
}

TEST_F(TrainerRestart, OverwriteStartsOverAndClearsTheOldRun) {
    const std::string base = text("out", "  max_steps: 4\n  save_steps: 2\n");
    run(job(base));
    fs::create_directories(path("out/.tmp-checkpoint-9"));  // a writer that crashed
    write("out/notes.txt", "mine");
    write("out/runs/README", "mine too");
    auto events = [&] {
        int n = 0;
        for (const auto& e : fs::directory_iterator(path("out/runs")))
            n += e.path().filename().string().starts_with("events.out.tfevents.") ? 1 : 0;
        return n;
    };
    ASSERT_EQ(list_checkpoints(path("out")).size(), 2u);
    ASSERT_EQ(events(), 1);
    ASSERT_TRUE(fs::exists(path("out/metrics.jsonl")));

    // A job that fails its set-up leaves the old run alone.
    expect_train_error(
        [&] {
            Trainer(job(base, {"hyperparameters.overwrite_output_dir=true",
                               "data.max_seq_length=100000"}),
                    quiet());
        },
        {"max_position_embeddings"});
    EXPECT_EQ(list_checkpoints(path("out")).size(), 2u);

    // resume_from_checkpoint: latest wins over overwrite_output_dir.
    {
        Trainer t(job(base, {"hyperparameters.overwrite_output_dir=true",
                             "hyperparameters.resume_from_checkpoint=latest"}),
                  quiet());
        EXPECT_EQ(t.state().global_step, 4);
    }

    const Run again = run(job(base, {"hyperparameters.overwrite_output_dir=true"}));
    expect_in(again.log,
              "overwrite_output_dir: removed the previous run's 3 checkpoint folder(s), 1 "
              "TensorBoard event file(s), metrics.jsonl");
    expect_in(again.log, "starting fresh (overwrite_output_dir)");
    EXPECT_EQ(again.result.start_step, 0);
    EXPECT_EQ(logged_losses("out").size(), 4u);  // this run's steps only

    // What is removed, and what stays (checked before a new run adds its own).
    fs::create_directories(path("out/.tmp-checkpoint-9"));
    ASSERT_EQ(list_checkpoints(path("out")).size(), 2u);
    Trainer t(job(base, {"hyperparameters.overwrite_output_dir=true"}), quiet());
    EXPECT_EQ(t.state().global_step, 0);
    EXPECT_TRUE(list_checkpoints(path("out")).empty());
    EXPECT_FALSE(fs::exists(path("out/.tmp-checkpoint-9")));
    EXPECT_FALSE(fs::exists(path("out/checkpoint-2")));
    EXPECT_EQ(events(), 0);
    EXPECT_FALSE(fs::exists(path("out/metrics.jsonl")));
    EXPECT_TRUE(fs::exists(path("out/notes.txt")));
    EXPECT_TRUE(fs::exists(path("out/runs/README")));
}

TEST_F(TrainerRestart, IncompleteCheckpointsArePassedOver) {
    const std::string base = text("out", "  max_steps: 8\n  save_steps: 2\n");
    const Run full = run(job(text("full", "  max_steps: 8\n  save_steps: 2\n")));
    const Run first = run(job(base), 5);  // checkpoints 2, 4 and 5
    ASSERT_EQ(list_checkpoints(path("out")).size(), 3u);
    // Step 5's copy stopped short; step 7's never got its manifest; step 8's
    // writer crashed before its rename.
    fs::resize_file(path("out/checkpoint-5/optimizer.safetensors"), 100);
    fs::create_directories(path("out/checkpoint-7"));
    write("out/checkpoint-7/model.safetensors", "partial");
    fs::create_directories(path("out/.tmp-checkpoint-8"));
    const Run second = run(job(base));
    expect_in(second.log,
              "passed over an incomplete checkpoint: checkpoint-7: no "
              "loom_checkpoint.json");
    expect_in(second.log,
              "passed over an incomplete checkpoint: checkpoint-5: "
              "optimizer.safetensors has 100 bytes");
    expect_in(second.log, "resuming from checkpoint-4 (found in output_dir; same job)");
    ASSERT_EQ(second.result.start_step, 4);
    std::vector<double> all(first.result.step_losses.begin(), first.result.step_losses.begin() + 4);
    all.insert(all.end(), second.result.step_losses.begin(), second.result.step_losses.end());
    EXPECT_EQ(all, full.result.step_losses);
}

// A checkpoint from before job identities were recorded: its manifest does
// not list job_identity.json.
TEST_F(TrainerRestart, CheckpointWithoutIdentityStillResumes) {
    const std::string base = text("out", "  max_steps: 6\n");
    run(job(base), 3);
    const std::string dir = path("out/checkpoint-3");
    fs::remove(dir + "/job_identity.json");
    json m = json::parse(read_file(dir + "/loom_checkpoint.json"));
    ASSERT_EQ(m["files"].erase("job_identity.json"), 1u);
    write("out/checkpoint-3/loom_checkpoint.json", m.dump(2));
    const Run r = run(job(base, {"hyperparameters.learning_rate=0.02"}));
    expect_in(r.log,
              "resuming from checkpoint-3 (found in output_dir; written before job "
              "identities were recorded, so its job could not be checked");
    EXPECT_EQ(r.result.start_step, 3);
}

}  // namespace
}  // namespace loom::test
