// Hugging Face and SageMaker names with Loom's meaning: gradient_checkpointing,
// checkpoint_s3_uri, report_to, do_train / do_eval. A synonym beside its Loom
// key with another value is an error naming both; each switch leaves a note
// that says what it did.
#include <gtest/gtest.h>

#include <algorithm>

#include "job_test_util.h"

namespace loom {
namespace {

using test::expect_job_error;
using test::k_min_job;
using test::parse_job;

bool has_note(const Job& job, const std::string& note) {
    return std::find(job.notes.begin(), job.notes.end(), note) != job.notes.end();
}

std::string all_notes(const Job& job) {
    std::string s;
    for (const auto& n : job.notes) s += "\n  " + n;
    return s;
}

Job parse_for_training(const std::string& text) {
    JobParseOptions o;
    o.check_paths = false;
    o.for_training = true;
    return job_parse(text, "job.yaml", "/jobs", {}, o);
}

TEST(JobCompat, GradientCheckpointingIsActivationCheckpointing) {
    Job job =
        parse_job(std::string(k_min_job) + "hyperparameters: {gradient_checkpointing: true}\n");
    EXPECT_TRUE(job.distribution.activation_checkpointing);
    // Whatever else is noted, the precision comes first.
    EXPECT_EQ(job.notes.front(), "precision: fp32 (hyperparameters.bf16 and fp16 are off)");
    EXPECT_TRUE(has_note(job,
                         "hyperparameters.gradient_checkpointing: true is applied as "
                         "distribution.activation_checkpointing: true (checkpoint_every 1)"))
        << all_notes(job);
    // It satisfies offload_activations' need for checkpointing, and the same
    // value written both ways is fine.
    Job both = parse_job(std::string(k_min_job) +
                         "hyperparameters: {gradient_checkpointing: true}\n"
                         "distribution: {activation_checkpointing: true, offload_activations: "
                         "true}\n");
    EXPECT_TRUE(both.distribution.offload_activations);
    EXPECT_EQ(expect_job_error(std::string(k_min_job) +
                                   "hyperparameters:\n  gradient_checkpointing: true\n"
                                   "distribution:\n  activation_checkpointing: false\n",
                               {}),
              "job.yaml:6: hyperparameters.gradient_checkpointing: true disagrees with "
              "distribution.activation_checkpointing: false (job.yaml:8); gradient_checkpointing "
              "is Hugging Face's name for it: keep one of them");
    expect_job_error(
        std::string(k_min_job) +
            "hyperparameters:\n  gradient_checkpointing: false\n"
            "distribution:\n  smdistributed:\n    modelparallel:\n"
            "      enabled: true\n      parameters: {activation_checkpointing: true}\n",
        {"job.yaml:6:",
         "disagrees with distribution.smdistributed.modelparallel."
         "parameters.activation_checkpointing: true"});
}

TEST(JobCompat, CheckpointS3UriIsCheckpointUri) {
    Job job = parse_job(std::string(k_min_job) + "checkpoint_s3_uri: s3://bucket/run\n");
    EXPECT_EQ(job.checkpoint.checkpoint_uri, "s3://bucket/run");
    EXPECT_EQ(parse_job(std::string(k_min_job) +
                        "checkpoint_uri: s3://b/r\ncheckpoint_s3_uri: s3://b/r\n")
                  .checkpoint.checkpoint_uri,
              "s3://b/r");
    EXPECT_EQ(expect_job_error(std::string(k_min_job) +
                                   "checkpoint_uri: s3://b/one\ncheckpoint_s3_uri: s3://b/two\n",
                               {}),
              "job.yaml:6: checkpoint_s3_uri: 's3://b/two' disagrees with checkpoint_uri: "
              "'s3://b/one' (job.yaml:5); checkpoint_s3_uri is SageMaker's name for it: keep "
              "one of them");
}

TEST(JobCompat, ReportToSaysWhatIsWritten) {
    Job tb = parse_job(std::string(k_min_job) + "hyperparameters: {report_to: tensorboard}\n");
    EXPECT_TRUE(has_note(tb,
                         "hyperparameters.report_to: tensorboard: events are written to "
                         "/jobs/trainer_output/runs (Loom always writes them, and metrics.jsonl "
                         "in output_dir)"))
        << all_notes(tb);
    Job none = parse_job(std::string(k_min_job) + "hyperparameters: {report_to: none}\n");
    EXPECT_TRUE(has_note(none,
                         "hyperparameters.report_to: none: nothing is sent to any service; the "
                         "TensorBoard events in /jobs/trainer_output/runs and metrics.jsonl are "
                         "local files Loom always writes"))
        << all_notes(none);
    Job list = parse_job(std::string(k_min_job) + "hyperparameters: {report_to: [all, wandb]}\n");
    EXPECT_TRUE(has_note(list,
                         "hyperparameters.report_to: all: Loom's one integration is TensorBoard; "
                         "its events are written to /jobs/trainer_output/runs (always, with "
                         "metrics.jsonl in output_dir)"))
        << all_notes(list);
    EXPECT_TRUE(has_note(list,
                         "hyperparameters.report_to: wandb is not available in Loom, so nothing "
                         "is sent to it; the metrics go to metrics.jsonl and TensorBoard events "
                         "in /jobs/trainer_output/runs"))
        << all_notes(list);
    EXPECT_EQ(expect_job_error(
                  std::string(k_min_job) + "hyperparameters:\n  report_to: tensorbord\n", {}),
              "job.yaml:6: hyperparameters.report_to: 'tensorbord' is not an integration "
              "(expected tensorboard, all or none, or one of Hugging Face's: wandb, mlflow, "
              "...); did you mean 'tensorboard'?");
}

TEST(JobCompat, DoTrainFalseIsAnErrorForLoomTrainOnly) {
    const std::string text = std::string(k_min_job) + "hyperparameters:\n  do_train: false\n";
    EXPECT_EQ(test::expect_error([&] { parse_for_training(text); }, {}),
              "job.yaml:6: hyperparameters.do_train: false, but loom train always trains; to "
              "evaluate the model without training run: loom eval job.yaml");
    // `loom eval` and `loom plan` read the same job without complaint.
    EXPECT_NO_THROW(parse_job(text));
    EXPECT_NO_THROW(
        parse_for_training(std::string(k_min_job) + "hyperparameters: {do_train: true}\n"));
}

TEST(JobCompat, DoEvalFalseLeavesTheEvalSetUnread) {
    const std::string text =
        std::string(k_min_job) + "  eval: data/eval.jsonl\nhyperparameters: {do_eval: false}\n";
    Job job = parse_for_training(text);
    EXPECT_TRUE(job.data.eval.empty());
    EXPECT_TRUE(has_note(job,
                         "hyperparameters.do_eval: false: data.eval (/jobs/data/eval.jsonl) is not "
                         "read and the model is not evaluated"))
        << all_notes(job);
    // Other commands keep it (`loom eval` evaluates whatever do_eval says).
    EXPECT_EQ(parse_job(text).data.eval, "/jobs/data/eval.jsonl");
    // do_eval: false beside an eval strategy contradicts itself.
    EXPECT_EQ(test::expect_error(
                  [&] {
                      parse_for_training(std::string(k_min_job) +
                                         "  eval: e.jsonl\nhyperparameters:\n  do_eval: false\n"
                                         "  eval_strategy: steps\n");
                  },
                  {}),
              "job.yaml:7: hyperparameters.do_eval: false disagrees with "
              "hyperparameters.eval_strategy: steps (job.yaml:8), which evaluates during "
              "training (Hugging Face turns do_eval on for it): keep one of them");
}

TEST(JobCompat, DoEvalTrueNeedsAnEvalSet) {
    EXPECT_EQ(expect_job_error(std::string(k_min_job) + "hyperparameters:\n  do_eval: true\n", {}),
              "job.yaml:6: hyperparameters.do_eval: true needs an eval set: add data.eval");
    Job job = parse_for_training(std::string(k_min_job) +
                                 "  eval: e.jsonl\nhyperparameters: {do_eval: true}\n");
    EXPECT_EQ(job.data.eval, "/jobs/e.jsonl");
    EXPECT_TRUE(has_note(job,
                         "hyperparameters.do_eval: true: data.eval is evaluated after the last "
                         "step (Loom does this whenever data.eval is given)"))
        << all_notes(job);
}

}  // namespace
}  // namespace loom
