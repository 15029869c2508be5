// Job identity: which settings make another run (named with both values) and
// which do not (layout, cadences, run length, where results go).
#include <gtest/gtest.h>

#include "core/check.h"
#include "train/job_identity.h"

namespace loom {
namespace {

using json = nlohmann::json;

constexpr const char* k_job = R"(model: {config: /m/config.json, tokenizer: /m/tokenizer.json}
task: sequence-classification
data: {train: /d/train.jsonl, label_map: {a: neg, b: pos}}
hyperparameters:
  output_dir: /out
  per_device_train_batch_size: 8
  learning_rate: 1.0e-2
)";

Job parse(const std::vector<std::string>& overrides, const std::string& text = k_job) {
    JobParseOptions o;
    o.check_paths = false;
    return job_parse(text, "job.yaml", "/jobs", overrides, o);
}

std::vector<std::string> diff(const std::vector<std::string>& before,
                              const std::vector<std::string>& after, int64_t dp_before = 1,
                              int64_t dp_after = 1) {
    return job_identity_differences(job_identity(parse(before), dp_before),
                                    job_identity(parse(after), dp_after), "test");
}

TEST(JobIdentity, LayoutCadenceLengthAndPlacesAreNotPartOfIt) {
    for (const char* o :
         {"distribution.zero_stage=2", "distribution.activation_checkpointing=true",
          "distribution.bucket_size_mb=1", "hyperparameters.output_dir=/elsewhere",
          "hyperparameters.logging_dir=/logs", "hyperparameters.overwrite_output_dir=true",
          "hyperparameters.resume_from_checkpoint=latest", "hyperparameters.max_steps=100",
          "hyperparameters.num_train_epochs=10", "hyperparameters.per_device_eval_batch_size=64",
          "hyperparameters.logging_steps=7", "hyperparameters.eval_steps=9",
          "hyperparameters.save_steps=11", "hyperparameters.save_total_limit=2",
          "hyperparameters.bf16=true", "hyperparameters.use_cpu=true",
          "hyperparameters.disable_tqdm=true", "checkpoint_uri=s3://bucket/run"})
        EXPECT_TRUE(diff({}, {o}).empty()) << o;
    // 8 per device on 1 rank is 4 per device on 2 ranks.
    EXPECT_TRUE(diff({}, {"hyperparameters.per_device_train_batch_size=4"}, 1, 2).empty());
}

TEST(JobIdentity, DifferencesNameTheKeyAndBothValues) {
    EXPECT_EQ(diff({}, {"hyperparameters.learning_rate=0.02"}),
              std::vector<std::string>(
                  {"hyperparameters.learning_rate: 0.01 (checkpoint) vs 0.02 (this job)"}));
    // The same number written another way is the same setting.
    EXPECT_TRUE(diff({}, {"hyperparameters.learning_rate=0.010"}).empty());
    const auto batch = diff({}, {}, 1, 2);
    ASSERT_EQ(batch.size(), 1u);
    EXPECT_EQ(batch[0].find("hyperparameters.global_train_batch_size: 8 (checkpoint) vs 16 (this "
                            "job)"),
              0u)
        << batch[0];
    EXPECT_EQ(diff({}, {"hyperparameters.gradient_accumulation_steps=2",
                        "hyperparameters.per_device_train_batch_size=4"}),
              std::vector<std::string>({"hyperparameters.gradient_accumulation_steps: 1 "
                                        "(checkpoint) vs 2 (this job)"}));
    std::string no_labels = k_job;
    const std::string map = ", label_map: {a: neg, b: pos}";
    no_labels.erase(no_labels.find(map), map.size());
    EXPECT_EQ(
        job_identity_differences(job_identity(parse({}, no_labels), 1),
                                 job_identity(parse({"task=masked-lm"}, no_labels), 1), "test"),
        std::vector<std::string>(
            {"task: sequence-classification (checkpoint) vs masked-lm (this job)"}));
    EXPECT_EQ(diff({}, {"data.max_seq_length=64", "hyperparameters.seed=3"}),
              std::vector<std::string>({"data.max_seq_length: 128 (checkpoint) vs 64 (this job)",
                                        "hyperparameters.data_seed: 42 (checkpoint) vs 3 (this "
                                        "job)",
                                        "hyperparameters.seed: 42 (checkpoint) vs 3 (this job)"}));
    // Setting a key that is written only when set.
    EXPECT_EQ(diff({}, {"hyperparameters.lr_scheduler_kwargs.num_cycles=0.5"}),
              std::vector<std::string>({"hyperparameters.lr_scheduler_kwargs.num_cycles: (none) "
                                        "(checkpoint) vs 0.5 (this job)"}));
}

// The label map's order numbers the labels.
TEST(JobIdentity, ReorderedLabelMapIsAnotherJob) {
    std::string swapped = k_job;
    swapped.replace(swapped.find("{a: neg, b: pos}"), 16, "{b: pos, a: neg}");
    const auto d = job_identity_differences(job_identity(parse({}), 1),
                                            job_identity(parse({}, swapped), 1), "test");
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].find("data.label_map: "), 0u) << d[0];
}

// A moved model folder is one difference, not one per file in it.
TEST(JobIdentity, MovedModelFolderIsNamedOnce) {
    std::string text = k_job;
    text.replace(0, text.find('\n'), "model: /models/a");
    std::string moved = text;
    moved.replace(0, moved.find('\n'), "model: /models/b");
    const auto d = job_identity_differences(job_identity(parse({}, text), 1),
                                            job_identity(parse({}, moved), 1), "test");
    EXPECT_EQ(d, std::vector<std::string>(
                     {"model.path: /models/a (checkpoint) vs /models/b (this job)"}));
}

TEST(JobIdentity, KeysOnlyOneSideKnowsAreNotDifferences) {
    json saved = job_identity(parse({}), 1);
    saved["fields"]["hyperparameters.retired_key"] = "1";
    json current = job_identity(parse({}), 1);
    current["fields"].erase("data.sample_by");  // as if a newer key
    EXPECT_TRUE(job_identity_differences(saved, current, "test").empty());
    try {
        job_identity_differences(json::object({{"fields", json::object()}}), current,
                                 "ckpt/job_identity.json");
        ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("ckpt/job_identity.json: not a job identity"),
                  std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace loom
