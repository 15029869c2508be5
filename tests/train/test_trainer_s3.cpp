// Training from token shards in an S3 bucket (a real s3rver on loopback,
// uploaded with s3cmd): the per-step losses equal those from the same shards
// on local disk; a truncated shard object is an error naming its URI and the
// byte offset.
#include <gtest/gtest.h>

#include "data/preprocess.h"
#include "io/s3_test_server.h"
#include "trainer_e2e_util.h"

namespace loom::test {
namespace {

class TrainS3 : public S3ServerTest {
  protected:
    void SetUp() override {
        S3ServerTest::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        runtime_init({1});
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
    Job make_job(const std::string& train, const std::string& out) {
        const std::string text =
            "model:\n  config: " + data_path("train/tiny-bert.json") +
            "\n  tokenizer: " + data_path(k_wordpiece) +
            "\ntask: masked-lm\ndata:\n  train: " + train +
            "\n  max_seq_length: 32\nhyperparameters:\n  output_dir: " + path(out) +
            "\n  max_steps: 8\n  per_device_train_batch_size: 8\n  learning_rate: 1.0e-2\n"
            "  save_strategy: 'no'\n";
        return job_parse(text, path("job.yaml"), path(""), {});
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

}  // namespace
}  // namespace loom::test
