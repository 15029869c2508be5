// Hub model ids in `model:` and the push_to_hub keys of `hyperparameters:`,
// spelled as HF TrainingArguments spells them: parsed, checked, and logged
// (or said to change nothing), the token never echoed.
#include <gtest/gtest.h>

#include <algorithm>

#include "job_test_util.h"

namespace loom {
namespace {

using test::expect_job_error;
using test::parse_job;

const char* k_rest =
    "task: sequence-classification\n"
    "data:\n"
    "  train: data/train.jsonl\n";

bool has_note(const Job& job, const std::string& piece) {
    return std::any_of(job.notes.begin(), job.notes.end(),
                       [&](const std::string& n) { return n.find(piece) != std::string::npos; });
}

TEST(HubKeys, ModelIdsAndFoldersAreToldApart) {
    Job j = parse_job(std::string("model: distilbert-base-multilingual-cased\n") + k_rest);
    EXPECT_EQ(j.model.hub_id, "distilbert-base-multilingual-cased");
    j = parse_job(std::string("model: {path: org/name, revision: v1.0}\n") + k_rest);
    EXPECT_EQ(j.model.hub_id, "org/name");
    EXPECT_EQ(j.model.revision, "v1.0");
    // Paths that say they are paths are never ids.
    for (const char* folder : {"./models/bert", "/abs/bert", "~/bert", "a/b/c"}) {
        j = parse_job(std::string("model: ") + folder + "\n" + k_rest);
        EXPECT_TRUE(j.model.hub_id.empty()) << folder;
        EXPECT_FALSE(j.model.path.empty()) << folder;
    }
    expect_job_error(std::string("model: {path: ./bert, revision: main}\n") + k_rest,
                     {"model.revision", "only applies to a Hub model id"});
}

TEST(HubKeys, TrainerKeysAreRead) {
    const Job j = parse_job(std::string("model: org/base\n") + k_rest +
                            "hyperparameters:\n"
                            "  push_to_hub: True\n"
                            "  hub_model_id: org/out\n"
                            "  hub_strategy: checkpoint\n"
                            "  hub_token: hf_secret123\n"
                            "  hub_private_repo: true\n"
                            "  hub_always_push: true\n");
    EXPECT_TRUE(j.hub.push_to_hub);
    EXPECT_EQ(j.hub.hub_model_id, "org/out");
    EXPECT_EQ(j.hub.hub_strategy, HubStrategy::checkpoint);
    EXPECT_EQ(j.hub.hub_token, "hf_secret123");
    EXPECT_TRUE(j.hub.hub_private_repo);
    EXPECT_TRUE(j.hub.hub_always_push);
    EXPECT_TRUE(has_note(j, "hub: pushing to org/out (checkpoint, private, hub_always_push"));
    for (const auto& n : j.notes) EXPECT_EQ(n.find("hf_secret123"), std::string::npos) << n;
    EXPECT_EQ(job_to_yaml(j).find("hf_secret123"), std::string::npos);
}

TEST(HubKeys, BadValuesNameTheKey) {
    const std::string base = std::string("model: org/base\n") + k_rest + "hyperparameters:\n";
    expect_job_error(base + "  hub_strategy: sometimes\n", {"hub_strategy", "sometimes"});
    expect_job_error(base + "  hub_model_id: ../evil\n", {"hub_model_id", "not a Hub repo id"});
    const std::string msg = expect_job_error(base + "  hub_token: 'hf_a b'\n", {"hub_token"});
    EXPECT_EQ(msg.find("hf_a b"), std::string::npos) << msg;
}

TEST(HubKeys, KeysWithoutPushToHubSayTheyChangeNothing) {
    const Job j = parse_job(std::string("model: org/base\n") + k_rest +
                            "hyperparameters:\n  hub_model_id: org/out\n  hub_strategy: end\n");
    EXPECT_FALSE(j.hub.push_to_hub);
    EXPECT_TRUE(has_note(j, "hyperparameters.hub_model_id has no effect: push_to_hub is not set"));
    EXPECT_TRUE(has_note(j, "hyperparameters.hub_strategy has no effect: push_to_hub is not set"));
}

TEST(HubKeys, SavesOffMeansOnlyTheEndPushes) {
    const Job j = parse_job(std::string("model: org/base\n") + k_rest +
                            "hyperparameters:\n  push_to_hub: true\n  save_strategy: 'no'\n");
    EXPECT_TRUE(has_note(j, "only the end of training pushes"));
}

}  // namespace
}  // namespace loom
