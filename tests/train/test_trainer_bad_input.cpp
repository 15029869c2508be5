// Bad input to `loom train`, one test each: every one fails before training
// with a message that names the problem (or, where the job allows it, is
// counted and reported).
#include <gtest/gtest.h>

#include "io/checkpoint.h"
#include "trainer_e2e_util.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;

class TrainerBadInput : public TrainDir {
  protected:
    // A classification job whose training data is `train_text`.
    std::string job_with_train(const std::string& train_text, const std::string& data_extra = "") {
        const std::string train = write("train.jsonl", train_text);
        eval_ = false;  // the eval set's labels would not all be known
        std::string t = job_text("sequence-classification", "out", "  max_steps: 1\n", data_extra);
        const std::string from = data_path("train/cls_train.jsonl");
        t.replace(t.find(from), from.size(), train);
        return t;
    }
};

TEST_F(TrainerBadInput, MalformedJsonLineNamesFileAndLine) {
    const std::string text = job_with_train(
        "{\"text\": \"a cat\", \"label\": \"animal\"}\n{\"text\": \"oops\n"
        "{\"text\": \"bread\", \"label\": \"food\"}\n");
    expect_train_error([&] { Trainer(job(text), quiet()); }, {"train.jsonl:2"});
}

TEST_F(TrainerBadInput, SkipBadLinesCountsThem) {
    const std::string text = job_with_train(
        "{\"text\": \"a cat\", \"label\": \"animal\"}\n{\"text\": \"oops\n"
        "{\"text\": \"bread\", \"label\": \"food\"}\n",
        "  skip_bad_lines: true\n");
    Trainer tr(job(text), quiet());
    ASSERT_NE(tr.train_data(), nullptr);
    EXPECT_EQ(tr.train_data()->features.size(), 2u);
    std::FILE* f = std::tmpfile();
    TrainerOptions o = quiet();
    o.quiet = false;
    o.out = f;
    Trainer tr2(job(text, {"hyperparameters.output_dir=" + path("out2")}), o);
    tr2.train();
    std::rewind(f);
    std::string printed;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) printed.append(buf, n);
    std::fclose(f);
    EXPECT_NE(printed.find("skipped 1 malformed line"), std::string::npos) << printed;
    EXPECT_NE(printed.find("train.jsonl:2"), std::string::npos) << printed;
}

TEST_F(TrainerBadInput, LabelOutsideLabelMap) {
    const std::string text =
        job_with_train("{\"text\": \"a cat\", \"label\": 1}\n{\"text\": \"bread\", \"label\": 7}\n",
                       "  label_map: {1: animal, 2: food}\n");
    expect_train_error([&] { Trainer(job(text), quiet()); }, {"train.jsonl:2", "7"});
}

TEST_F(TrainerBadInput, EmptyDataset) {
    const std::string text = job_with_train("\n\n");
    expect_train_error([&] { Trainer(job(text), quiet()); }, {"train.jsonl"});
}

TEST_F(TrainerBadInput, MissingColumn) {
    const std::string text = job_with_train("{\"sentence\": \"a cat\", \"label\": \"animal\"}\n");
    expect_train_error([&] { Trainer(job(text), quiet()); }, {"train.jsonl:1", "text"});
}

TEST_F(TrainerBadInput, LongTextIsTruncatedAndCounted) {
    std::string long_text;
    for (int i = 0; i < 200; ++i) long_text += "cat ";
    const std::string text = job_with_train("{\"text\": \"" + long_text +
                                            "\", \"label\": \"animal\"}\n{\"text\": \"bread\", "
                                            "\"label\": \"food\"}\n");
    Trainer tr(job(text), quiet());
    EXPECT_EQ(tr.train_data()->stats.truncated, 1);
    size_t longest = 0;
    for (const Feature& f : tr.train_data()->features) longest = std::max(longest, f.ids.size());
    EXPECT_EQ(longest, 32u);  // max_seq_length
    EXPECT_EQ(tr.train().global_step, 1);
}

TEST_F(TrainerBadInput, UnwritableOutputDirFailsBeforeTraining) {
    // A path below a regular file can never be created, even as root.
    write("blocker", "x");
    const std::string text = job_text("sequence-classification", "blocker/out", "  max_steps: 1\n");
    expect_train_error([&] { Trainer(job(text), quiet()); },
                       {"output_dir", "blocker/out", "not writable"});
}

TEST_F(TrainerBadInput, MaxSeqLengthBeyondThePositionTable) {
    const std::string text = job_text("sequence-classification", "out", "  max_steps: 1\n");
    expect_train_error([&] { Trainer(job(text, {"data.max_seq_length=100"}), quiet()); },
                       {"max_seq_length", "max_position_embeddings"});
}

}  // namespace
}  // namespace loom::test
