// Training from token shards (`loom preprocess` output as data.train):
//   - short one-line documents make exactly the rows the text reader makes,
//     so the per-step losses equal those of training from the JSONL itself;
//   - a shard run resumes with the uninterrupted losses (the data position is
//     part of the checkpoint), and causal LM trains from shards too;
//   - shards from another tokenizer or for another task are refused.
#include <gtest/gtest.h>

#include "data/preprocess.h"
#include "trainer_e2e_util.h"

namespace loom::test {
namespace {

class TrainShards : public TrainDir {
  protected:
    std::string make_shards(const std::string& name, Task task, const char* tokenizer,
                            int64_t max_len = 32) {
        PreprocessOptions o;
        o.inputs = {data_path("train/lm_train.jsonl")};
        o.output = path(name);
        o.tokenizer_path = data_path(tokenizer);
        o.task = task;
        o.max_seq_length = max_len;
        o.shard_bytes = 512;  // several shards even for tiny data
        preprocess(o);
        return path(name);
    }
};

TEST_F(TrainShards, SameRowsAsTheTextReaderGiveTheSameLosses) {
    eval_ = false;
    const std::string shards = make_shards("shards", Task::masked_lm, k_wordpiece);
    const std::string extra = "  max_steps: 12\n  per_device_train_batch_size: 8\n";
    const TrainResult text = Trainer(job(job_text("masked-lm", "text", extra)), quiet()).train();
    const TrainResult sh =
        Trainer(job(job_text("masked-lm", "sh", extra), {"data.train=" + shards}), quiet()).train();
    ASSERT_EQ(text.step_losses.size(), 12u);
    ASSERT_EQ(sh.step_losses, text.step_losses);
    EXPECT_LT(mean(sh.step_losses, 8, 12), mean(sh.step_losses, 0, 4));
}

TEST_F(TrainShards, ResumeRepeatsTheUninterruptedLosses) {
    eval_ = false;
    const std::string shards = make_shards("shards", Task::causal_lm, k_unigram, 16);
    const std::string extra = "  max_steps: 10\n  per_device_train_batch_size: 4\n";
    auto make = [&](const std::string& out, std::vector<std::string> ov) {
        ov.push_back("data.train=" + shards);
        return job(job_text("causal-lm", out, extra), ov);
    };
    Trainer full(make("full", {}), quiet());
    const TrainResult a = full.train();
    ASSERT_EQ(a.step_losses.size(), 10u);
    TrainerOptions o = quiet();
    o.interrupt_at_step = 6;
    const TrainResult b = Trainer(make("split", {}), o).train();
    Trainer second(make("split", {"hyperparameters.resume_from_checkpoint=latest"}), quiet());
    const TrainResult c = second.train();
    std::vector<double> joined = b.step_losses;
    joined.insert(joined.end(), c.step_losses.begin(), c.step_losses.end());
    EXPECT_EQ(joined, a.step_losses);
    EXPECT_EQ(params_of(second), params_of(full));
}

TEST_F(TrainShards, ShardsOfAnotherTokenizerOrTaskAreRefused) {
    eval_ = false;
    const std::string unigram = make_shards("uni", Task::masked_lm, k_unigram);
    expect_train_error(
        [&] { Trainer(job(job_text("masked-lm", "o1"), {"data.train=" + unigram}), quiet()); },
        {unigram, "another tokenizer", "loom preprocess"});
    const std::string clm = make_shards("clm", Task::causal_lm, k_wordpiece);
    expect_train_error(
        [&] { Trainer(job(job_text("masked-lm", "o2"), {"data.train=" + clm}), quiet()); },
        {clm, "causal-lm", "masked-lm"});
}

}  // namespace
}  // namespace loom::test
