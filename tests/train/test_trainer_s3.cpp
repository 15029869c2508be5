// Object storage end to end (a real s3rver on loopback, s3cmd as the
// independent client): training from shards in a bucket gives the local
// losses; a truncated shard object names its URI and offset; checkpoint_uri
// resumes a fresh job exactly and ignores half-uploaded checkpoints, refuses
// another job's and is cleared by overwrite_output_dir; an s3:// output_dir
// receives the final model.
#include <gtest/gtest.h>

#include "data/preprocess.h"
#include "io/s3_test_server.h"
#include "trainer_e2e_util.h"

namespace loom::test {
namespace {

class TrainS3 : public S3ServerTest {
  protected:
    void TearDown() override {
        ::unsetenv("LOOM_CACHE_DIR");
        S3ServerTest::TearDown();
    }
    void SetUp() override {
        S3ServerTest::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        runtime_init({1});
        // Staging folders and cached downloads stay inside the test's folder.
        ::setenv("LOOM_CACHE_DIR", path("cache").c_str(), 1);
        if (!have_s3cmd()) GTEST_SKIP() << "s3cmd is not installed (Debian: apt-get install s3cmd)";
        PreprocessOptions o;
        o.inputs = {data_path("train/lm_train.jsonl")};
        o.output = path("shards");
        o.tokenizer_path = data_path(k_wordpiece);
        o.max_seq_length = 32;
        o.shard_bytes = 1024;
        preprocess(o);
        s3cmd("put --recursive " + path("shards") + "/ " + uri("corpus/shards/"));
    }
    Job make_job(const std::string& train, const std::string& out, const std::string& extra = "",
                 const std::vector<std::string>& overrides = {}) {
        const std::string text =
            extra + "model:\n  config: " + data_path("train/tiny-bert.json") +
            "\n  tokenizer: " + data_path(k_wordpiece) +
            "\ntask: masked-lm\ndata:\n  train: " + train +
            "\n  max_seq_length: 32\nhyperparameters:\n  output_dir: " + path(out) +
            "\n  max_steps: 8\n  per_device_train_batch_size: 8\n  learning_rate: 1.0e-2\n"
            "  save_strategy: 'no'\n";
        return job_parse(text, path("job.yaml"), path(""), overrides);
    }
    static TrainerOptions quiet() {
        TrainerOptions o;
        o.quiet = true;
        o.handle_signals = false;
        return o;
    }
};

TEST_F(TrainS3, ShardsInABucketTrainLikeLocalShards) {
    const TrainResult local = Trainer(make_job(path("shards"), "local"), quiet()).train();
    const TrainResult remote = Trainer(make_job(uri("corpus/shards"), "remote"), quiet()).train();
    ASSERT_EQ(local.step_losses.size(), 8u);
    EXPECT_EQ(remote.step_losses, local.step_losses);
}

TEST_F(TrainS3, JsonlInABucketTrainsLikeTheLocalFile) {
    s3cmd("put " + data_path("train/lm_train.jsonl") + " " + uri("text/lm_train.jsonl"));
    const TrainResult local =
        Trainer(make_job(data_path("train/lm_train.jsonl"), "local"), quiet()).train();
    const TrainResult remote =
        Trainer(make_job(uri("text/lm_train.jsonl"), "remote"), quiet()).train();
    ASSERT_EQ(local.step_losses.size(), 8u);
    EXPECT_EQ(remote.step_losses, local.step_losses);
}

TEST_F(TrainS3, TruncatedShardObjectNamesTheUriAndOffset) {
    const std::string shard = path("shards/shard-00001.bin");
    const auto size = std::filesystem::file_size(shard);
    std::filesystem::resize_file(shard, size - 24);
    s3cmd("put " + shard + " " + uri("corpus/shards/shard-00001.bin"));
    const std::string msg =
        expect_train_error([&] { Trainer(make_job(uri("corpus/shards"), "cut"), quiet()); },
                           {uri("corpus/shards/shard-00001.bin")});
    EXPECT_NE(msg.find(std::to_string(size - 24)), std::string::npos) << msg;
}

// SageMaker's checkpoint_s3_uri: checkpoints are uploaded as they are
// written; a fresh job on a "new machine" (an empty output_dir) pointed at the
// same URI resumes from the newest complete one with the uninterrupted
// losses. A checkpoint whose upload stopped before its manifest is ignored.
TEST_F(TrainS3, CheckpointUriResumesAFreshJobExactly) {
    const std::string shards = path("shards");
    auto make = [&](const std::string& out, const std::vector<std::string>& ov) {
        std::vector<std::string> o = ov;
        o.push_back("hyperparameters.save_strategy=steps");
        o.push_back("hyperparameters.save_steps=3");
        o.push_back("hyperparameters.save_total_limit=2");
        return make_job(shards, out, "checkpoint_uri: " + uri("runs/r1") + "\n", o);
    };
    // The uninterrupted run, without any URI.
    Job plain = make_job(shards, "plain", "",
                         {"hyperparameters.save_strategy=steps", "hyperparameters.save_steps=3"});
    const TrainResult full = Trainer(plain, quiet()).train();
    ASSERT_EQ(full.step_losses.size(), 8u);

    TrainerOptions o = quiet();
    o.interrupt_at_step = 5;
    const TrainResult first = Trainer(make("machine1", {}), o).train();
    ASSERT_EQ(first.global_step, 5);
    // Steps 3 and 5 were written; the bucket mirrors the local rotation (limit 2).
    const std::string listing = s3cmd("ls --recursive " + uri("runs/r1/"));
    EXPECT_NE(listing.find("checkpoint-3/loom_checkpoint.json"), std::string::npos) << listing;
    EXPECT_NE(listing.find("checkpoint-5/loom_checkpoint.json"), std::string::npos) << listing;

    // An upload that died half way: files of checkpoint-9, no manifest.
    s3cmd("put " + path("machine1/checkpoint-5/model.safetensors") + " " +
          uri("runs/r1/checkpoint-9/model.safetensors"));

    Trainer second(make("machine2", {}), quiet());
    EXPECT_EQ(second.state().global_step, 5);
    const TrainResult rest = second.train();
    std::vector<double> joined = first.step_losses;
    joined.insert(joined.end(), rest.step_losses.begin(), rest.step_losses.end());
    EXPECT_EQ(joined, full.step_losses);
    // Rotation reached the bucket: with limit 2, checkpoint-3 is gone by the end.
    const std::string after = s3cmd("ls --recursive " + uri("runs/r1/"));
    EXPECT_EQ(after.find("checkpoint-3/"), std::string::npos) << after;
    EXPECT_NE(after.find("checkpoint-8/loom_checkpoint.json"), std::string::npos) << after;
}

// A replacement machine finds another job's checkpoint at the URI: refused,
// naming the difference. overwrite_output_dir starts over there too: the
// bucket's checkpoints go, so no later restart resumes the old run.
TEST_F(TrainS3, CheckpointUriHoldsOnlyTheSameJobsRun) {
    auto make = [&](const std::string& out, const std::vector<std::string>& ov) {
        std::vector<std::string> o = ov;
        o.push_back("hyperparameters.save_strategy=steps");
        o.push_back("hyperparameters.save_steps=3");
        return make_job(path("shards"), out, "checkpoint_uri: " + uri("runs/r2") + "\n", o);
    };
    TrainerOptions o = quiet();
    o.interrupt_at_step = 4;
    ASSERT_EQ(Trainer(make("machine1", {}), o).train().global_step, 4);
    expect_train_error(
        [&] { Trainer(make("machine2", {"hyperparameters.learning_rate=0.02"}), quiet()); },
        {"checkpoint-4 (downloaded from " + uri("runs/r2"), "different job",
         "hyperparameters.learning_rate: 0.01 (checkpoint) vs 0.02 (this job)"});
    Trainer fresh(make("machine3", {"hyperparameters.overwrite_output_dir=true"}), quiet());
    EXPECT_EQ(fresh.state().global_step, 0);
    const std::string listing = s3cmd("ls --recursive " + uri("runs/r2/"));
    EXPECT_EQ(listing.find("loom_checkpoint.json"), std::string::npos) << listing;
}

// output_dir: s3://...: the run works locally and the final Hugging Face
// folder lands in the bucket.
TEST_F(TrainS3, RemoteOutputDirReceivesTheFinalModel) {
    const TrainResult r = Trainer(make_job(path("shards"), "unused", "",
                                           {"hyperparameters.output_dir=" + uri("models/m1")}),
                                  quiet())
                              .train();
    EXPECT_EQ(r.global_step, 8);
    const std::string listing = s3cmd("ls --recursive " + uri("models/m1/"));
    for (const char* f :
         {"models/m1/model.safetensors", "models/m1/config.json", "models/m1/tokenizer.json",
          "models/m1/metrics.jsonl", "models/m1/report.html", "models/m1/runs/events.out.tfevents"})
        EXPECT_NE(listing.find(f), std::string::npos) << f << " missing in\n" << listing;
    // Nothing went to a local folder named after the URI.
    EXPECT_FALSE(std::filesystem::exists("s3:"));
}

}  // namespace
}  // namespace loom::test
