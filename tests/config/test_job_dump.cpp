// job_to_yaml writes the resolved job so that parsing it again gives the
// same Job, whatever shape the original was written in.
#include <gtest/gtest.h>

#include "config/job.h"
#include "job_test_util.h"

namespace loom {
namespace {

using test::parse_job;

void expect_round_trip(const Job& job) {
    std::string yaml = job_to_yaml(job);
    Job again = parse_job(yaml);
    EXPECT_TRUE(again == job) << yaml;
    // And the dump is a fixed point.
    EXPECT_EQ(job_to_yaml(again), yaml);
}

TEST(JobDump, RoundTripsARichJob) {
    Job job = parse_job(R"(
model: {path: hf, tokenizer: tok/tokenizer.json}
task: sequence-classification
data:
  train: train.csv
  eval: eval.csv
  text_column: "1"
  text_pair_column: "true"
  label_column: stars
  label_map: {1: negative, 2: negative, "3": neutral, 4: positive, 5: positive}
  pad_to_multiple_of: 8
  skip_bad_lines: true
  sample_by: paragraph
hyperparameters:
  num_train_epochs: 2.5
  learning_rate: 3.0e-5
  lr_scheduler_type: cosine_with_restarts
  lr_scheduler_kwargs: {num_cycles: 3}
  warmup_ratio: 0.06
  eval_strategy: steps
  eval_steps: 0.25
  save_steps: 0.5
  logging_steps: 0.05
  load_best_model_at_end: true
  metric_for_best_model: f1
  save_total_limit: 2
  resume_from_checkpoint: latest
  optim: sgd
distribution:
  tensor_parallel_degree: 2
  pipeline_parallel_degree: 2
  partition: [1, 1]
  placement_strategy: TPD
checkpoint_uri: s3://b/k
)");
    EXPECT_EQ(job.training.num_cycles, 3.0);
    expect_round_trip(job);
}

TEST(JobDump, RoundTripsSageMakerShapesAndDefaults) {
    expect_round_trip(parse_job(test::k_min_job));
    expect_round_trip(parse_job(std::string(test::k_min_job) +
                                "distribution: {smdistributed: {dataparallel: {enabled: true}}}\n"));
    Job smp = parse_job(std::string(test::k_min_job) + R"(distribution:
  smdistributed:
    modelparallel:
      enabled: true
      parameters: {pipeline_parallel_degree: 2, microbatches: 2, pipeline: simple, ddp: false}
  mpi: {enabled: true, processes_per_host: 4, custom_mpi_options: "-x NCCL_DEBUG=WARN"}
)");
    EXPECT_EQ(smp.distribution.pipeline, ScheduleKind::simple);
    expect_round_trip(smp);
    expect_round_trip(parse_job(
        "model: {config: c.json, tokenizer: t.json}\ntask: causal-lm\ndata: {train: t.txt}\n"));
    expect_round_trip(parse_job("model: m\ntask: question-answering\ndata: {train: s.json}\n"));
}

TEST(JobDump, ShowsResolvedValues) {
    std::string yaml = job_to_yaml(parse_job(std::string(test::k_min_job) +
                                             "hyperparameters: {learning_rate: 2e-5}\n"));
    EXPECT_NE(yaml.find("learning_rate: 2e-05"), std::string::npos) << yaml;
    EXPECT_NE(yaml.find("output_dir: \"/jobs/trainer_output\""), std::string::npos) << yaml;
    EXPECT_NE(yaml.find("task: sequence-classification"), std::string::npos) << yaml;
}

}  // namespace
}  // namespace loom
