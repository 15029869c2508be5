// Unknown keys: the hint is a known synonym (possibly in another section),
// the section the key belongs to, a valid key within a few edits, a small
// section's whole list, or nothing; never an unrelated key.
#include <gtest/gtest.h>

#include "config/key_hints.h"
#include "job_test_util.h"

namespace loom {
namespace {

using test::expect_job_error;
using test::k_min_job;

// The full error for `key: 1` written under `section` ("" = the top level).
std::string error_for(const std::string& section, const std::string& key) {
    std::string text = k_min_job;
    if (section.empty())
        text += key + ": 1\n";
    else if (section == "data")
        text += "  " + key + ": 1\n";
    else
        text += section + ":\n  " + key + ": 1\n";
    return expect_job_error(text, {"unknown key '" + key + "'"});
}

TEST(KeyHints, HuggingFaceAndSageMakerNamesPointAtLoomsKeys) {
    EXPECT_EQ(error_for("hyperparameters", "epochs"),
              "job.yaml:6: unknown key 'epochs' in hyperparameters; did you mean "
              "'num_train_epochs'?");
    EXPECT_EQ(error_for("hyperparameters", "steps"),
              "job.yaml:6: unknown key 'steps' in hyperparameters; did you mean 'max_steps'?");
    EXPECT_EQ(error_for("hyperparameters", "train_steps"),
              "job.yaml:6: unknown key 'train_steps' in hyperparameters; did you mean "
              "'max_steps'?");
    EXPECT_EQ(error_for("hyperparameters", "lr"),
              "job.yaml:6: unknown key 'lr' in hyperparameters; did you mean 'learning_rate'?");
    EXPECT_EQ(error_for("hyperparameters", "batch_size"),
              "job.yaml:6: unknown key 'batch_size' in hyperparameters; did you mean "
              "'per_device_train_batch_size'? (per rank; the global batch is this x "
              "gradient_accumulation_steps x data-parallel ranks)");
    EXPECT_EQ(error_for("", "model_name_or_path"),
              "job.yaml:5: unknown key 'model_name_or_path' in the top level of the job; did you "
              "mean 'model'? (a Hugging Face model folder with config.json, model.safetensors "
              "and tokenizer.json)");
    // Dashes and capitals read as the underscore spelling.
    EXPECT_NE(error_for("hyperparameters", "Train-Batch-Size")
                  .find("did you mean 'per_device_train_batch_size'?"),
              std::string::npos);
}

TEST(KeyHints, ASynonymMayLiveInAnotherSection) {
    // Written at the top level: the whole path.
    EXPECT_EQ(error_for("", "epochs"),
              "job.yaml:5: unknown key 'epochs' in the top level of the job; did you mean "
              "'hyperparameters.num_train_epochs'?");
    EXPECT_EQ(error_for("data", "model_name_or_path"),
              "job.yaml:5: unknown key 'model_name_or_path' in data; did you mean 'model'? (a "
              "Hugging Face model folder with config.json, model.safetensors and "
              "tokenizer.json)");
    // gradient_checkpointing is accepted in hyperparameters; inside
    // distribution it means the key of this section.
    EXPECT_EQ(error_for("distribution", "gradient_checkpointing"),
              "job.yaml:6: unknown key 'gradient_checkpointing' in distribution; did you mean "
              "'activation_checkpointing'?");
    EXPECT_EQ(error_for("", "gradient_checkpointing"),
              "job.yaml:5: unknown key 'gradient_checkpointing' in the top level of the job; it "
              "belongs under 'hyperparameters'");
    EXPECT_EQ(error_for("hyperparameters", "checkpoint_s3_uri"),
              "job.yaml:6: unknown key 'checkpoint_s3_uri' in hyperparameters; it belongs under "
              "the top level");
    EXPECT_EQ(error_for("hyperparameters", "processes_per_host"),
              "job.yaml:6: unknown key 'processes_per_host' in hyperparameters; did you mean "
              "'distribution.mpi.processes_per_host'? (ranks per host are started by the "
              "launcher, loom launch --nproc N or mpirun -np N; the job can only check the "
              "count)");
    EXPECT_EQ(error_for("distribution", "processes_per_host"),
              "job.yaml:6: unknown key 'processes_per_host' in distribution; did you mean "
              "'mpi.processes_per_host'? (ranks per host are started by the launcher, loom "
              "launch --nproc N or mpirun -np N; the job can only check the count)");
    EXPECT_EQ(error_for("hyperparameters", "zero_stage"),
              "job.yaml:6: unknown key 'zero_stage' in hyperparameters; it belongs under "
              "'distribution'");
    // A name with no Loom key says where the setting comes from instead.
    EXPECT_EQ(error_for("hyperparameters", "world_size"),
              "job.yaml:6: unknown key 'world_size' in hyperparameters; the number of ranks "
              "comes from the launcher: loom launch --nproc N job.yaml, mpirun -np N loom train "
              "job.yaml or srun");
}

TEST(KeyHints, EditDistanceOnlyWhenClose) {
    // Typos still find their key.
    EXPECT_EQ(error_for("hyperparameters", "num_train_epoch"),
              "job.yaml:6: unknown key 'num_train_epoch' in hyperparameters; did you mean "
              "'num_train_epochs'?");
    EXPECT_EQ(error_for("hyperparameters", "save_step"),
              "job.yaml:6: unknown key 'save_step' in hyperparameters; did you mean "
              "'save_steps'?");
    // An unrelated name in a large section gets no guess at all...
    EXPECT_EQ(error_for("hyperparameters", "label_smoothing_factor"),
              "job.yaml:6: unknown key 'label_smoothing_factor' in hyperparameters");
    EXPECT_EQ(error_for("hyperparameters", "eval_accumulation_steps"),
              "job.yaml:6: unknown key 'eval_accumulation_steps' in hyperparameters");
    EXPECT_EQ(error_for("hyperparameters", "fp32"),
              "job.yaml:6: unknown key 'fp32' in hyperparameters");
    // ...and in a small one the list of valid keys.
    EXPECT_EQ(error_for("", "pipeline_config"),
              "job.yaml:5: unknown key 'pipeline_config' in the top level of the job (expected "
              "one of: model, task, data, hyperparameters, distribution, peft, checkpoint_uri, "
              "checkpoint_s3_uri)");
}

TEST(KeyHints, SynonymTableTargetsAreLoomKeys) {
    EXPECT_EQ(config::synonym_target("epochs"), "hyperparameters.num_train_epochs");
    EXPECT_EQ(config::synonym_target("steps"), "hyperparameters.max_steps");
    EXPECT_EQ(config::synonym_target("model_name_or_path"), "model");
    EXPECT_EQ(config::synonym_target("gradient_checkpointing"),
              "distribution.activation_checkpointing");
    EXPECT_EQ(config::synonym_target("checkpoint_s3_uri"), "checkpoint_uri");
    EXPECT_EQ(config::synonym_target("no_such_name"), "");
}

}  // namespace
}  // namespace loom
