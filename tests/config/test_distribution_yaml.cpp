// The distribution block: SageMaker DDP, SMP model parallel and Loom's own
// keys all land in one DistributionArgs; conflicts and bad values name the key.
#include <gtest/gtest.h>

#include "config/job.h"
#include "job_test_util.h"

namespace loom {
namespace {

using test::expect_job_error;
using test::k_min_job;
using test::parse_job;

DistributionArgs dist(const std::string& block) {
    return parse_job(std::string(k_min_job) + "distribution:\n" + block).distribution;
}

TEST(DistributionYaml, SageMakerDataParallel) {
    DistributionArgs d = dist("  smdistributed:\n    dataparallel:\n      enabled: true\n");
    EXPECT_TRUE(d.smddp);
    EXPECT_FALSE(d.smp);
    EXPECT_EQ(d.data_parallel_degree, 0);  // every rank is a replica
    EXPECT_EQ(d.tensor_parallel_degree, 1);
    EXPECT_EQ(d.pipeline_parallel_degree, 1);
}

TEST(DistributionYaml, LoomKeys) {
    DistributionArgs d = dist(R"(  data_parallel_degree: 2
  zero_stage: 2
  bucket_size_mb: 50
  overlap_comm: false
  sparse_embedding_grads: false
  tensor_parallel_degree: 2
  pipeline_parallel_degree: 2
  microbatches: 4
  pipeline: interleaved
  virtual_stages: 2
  placement_strategy: PDT
  activation_checkpointing: true
  checkpoint_every: 2
  offload_activations: true
  activation_loading_horizon: 2
  partition: [3, 1]
  collective_timeout_s: 60
)");
    EXPECT_EQ(d.data_parallel_degree, 2);
    EXPECT_EQ(d.zero_stage, 2);
    EXPECT_EQ(d.bucket_size_mb, 50);
    EXPECT_FALSE(d.overlap_comm);
    EXPECT_FALSE(d.sparse_embedding_grads);
    EXPECT_TRUE(DistributionArgs{}.sparse_embedding_grads);
    EXPECT_EQ(d.tensor_parallel_degree, 2);
    EXPECT_EQ(d.pipeline_parallel_degree, 2);
    EXPECT_EQ(d.microbatches, 4);
    EXPECT_EQ(d.pipeline, ScheduleKind::interleaved);
    EXPECT_EQ(d.virtual_stages, 2);
    EXPECT_EQ(d.placement_strategy, "PDT");
    EXPECT_TRUE(d.activation_checkpointing);
    EXPECT_EQ(d.checkpoint_every, 2);
    EXPECT_TRUE(d.offload_activations);
    EXPECT_EQ(d.activation_loading_horizon, 2);
    EXPECT_EQ(d.partition, (std::vector<int64_t>{3, 1}));
    EXPECT_EQ(d.collective_timeout_s, 60);
    EXPECT_FALSE(d.smddp || d.smp);
}

TEST(DistributionYaml, SageMakerModelParallelMapsOntoLoomKeys) {
    Job job = parse_job(std::string(k_min_job) + R"(distribution:
  smdistributed:
    modelparallel:
      enabled: true
      parameters:
        partitions: 2
        tensor_parallel_degree: 2
        microbatches: 4
        pipeline: interleaved
        placement_strategy: spread
        ddp: true
        shard_optimizer_state: true
        activation_checkpointing: true
        offload_activations: true
        activation_loading_horizon: 8
        optimize: speed
        auto_partition: true
        bf16: true
  mpi:
    enabled: true
    processes_per_host: 8
)");
    const DistributionArgs& d = job.distribution;
    EXPECT_TRUE(d.smp);
    EXPECT_EQ(d.pipeline_parallel_degree, 2);  // SMP's older name "partitions"
    EXPECT_EQ(d.tensor_parallel_degree, 2);
    EXPECT_EQ(d.microbatches, 4);
    EXPECT_EQ(d.pipeline, ScheduleKind::one_f_one_b);  // SMP "interleaved" = 1F1B
    EXPECT_EQ(d.placement_strategy, "spread");
    EXPECT_EQ(d.data_parallel_degree, 0);
    EXPECT_EQ(d.zero_stage, 1);
    EXPECT_TRUE(d.activation_checkpointing);
    EXPECT_TRUE(d.offload_activations);
    EXPECT_EQ(d.activation_loading_horizon, 8);
    EXPECT_EQ(d.processes_per_host, 8);
    EXPECT_TRUE(job.training.bf16);
    const std::string prefix = "distribution.smdistributed.modelparallel.parameters.";
    EXPECT_EQ(d.ignored_keys, (std::vector<std::string>{prefix + "optimize",
                                                        prefix + "auto_partition"}));
    // Without ddp SMP runs no data-parallel replicas.
    EXPECT_EQ(dist("  smdistributed: {modelparallel: {enabled: true, parameters: {ddp: false}}}\n")
                  .data_parallel_degree,
              1);
}

TEST(DistributionYaml, DisabledModelParallelIsCheckedButNotApplied) {
    DistributionArgs d = dist(
        "  smdistributed: {modelparallel: {enabled: false, parameters: {partitions: 4}}}\n");
    EXPECT_FALSE(d.smp);
    EXPECT_EQ(d.pipeline_parallel_degree, 1);
    expect_job_error(std::string(k_min_job) +
                         "distribution:\n  smdistributed:\n    modelparallel:\n"
                         "      parameters: {pipline_parallel_degree: 2}\n",
                     {"job.yaml:8:", "unknown key 'pipline_parallel_degree'",
                      "did you mean 'pipeline_parallel_degree'?"});
}

TEST(DistributionYaml, ConflictsAndUnsupportedSettings) {
    expect_job_error(std::string(k_min_job) +
                         "distribution:\n  pipeline_parallel_degree: 2\n  smdistributed:\n"
                         "    modelparallel:\n      enabled: true\n"
                         "      parameters:\n        pipeline_parallel_degree: 4\n",
                     {"job.yaml:11:", "disagrees with distribution.pipeline_parallel_degree",
                      "job.yaml:6"});
    expect_job_error(std::string(k_min_job) +
                         "distribution:\n  smdistributed:\n    dataparallel: {enabled: true}\n"
                         "    modelparallel: {enabled: true}\n",
                     {"job.yaml:6:", "either dataparallel or modelparallel"});
    expect_job_error(std::string(k_min_job) +
                         "distribution:\n  smdistributed:\n    modelparallel:\n"
                         "      parameters: {horovod: true}\n",
                     {"horovod: not supported"});
    expect_job_error(std::string(k_min_job) +
                         "distribution:\n  smdistributed:\n    modelparallel:\n"
                         "      parameters: {sharded_data_parallel_degree: 4}\n",
                     {"ZeRO-3"});
}

TEST(DistributionYaml, TwoNamesForOneSettingMustAgree) {
    const std::string smp =
        "distribution:\n  smdistributed:\n    modelparallel:\n      enabled: true\n"
        "      parameters:\n";
    // SMP's partitions and pipeline_parallel_degree: equal is fine...
    EXPECT_EQ(parse_job(std::string(k_min_job) + smp +
                        "        partitions: 2\n        pipeline_parallel_degree: 2\n")
                  .distribution.pipeline_parallel_degree,
              2);
    // ...different is an error at the later line, naming both (not "the last wins").
    EXPECT_EQ(expect_job_error(std::string(k_min_job) + smp +
                                   "        pipeline_parallel_degree: 2\n        partitions: 4\n",
                               {}),
              "job.yaml:11: distribution.smdistributed.modelparallel.parameters.partitions: 4 "
              "disagrees with distribution.smdistributed.modelparallel.parameters."
              "pipeline_parallel_degree: 2 (job.yaml:10); partitions is SMP's older name for "
              "pipeline_parallel_degree: keep one of them");
    EXPECT_EQ(expect_job_error(std::string(k_min_job) + smp +
                                   "        partitions: 4\n        pipeline_parallel_degree: 2\n",
                               {}),
              "job.yaml:11: distribution.smdistributed.modelparallel.parameters."
              "pipeline_parallel_degree: 2 disagrees with distribution.smdistributed."
              "modelparallel.parameters.partitions: 4 (job.yaml:10); partitions is SMP's older "
              "name for pipeline_parallel_degree: keep one of them");
    // shard_optimizer_state is ZeRO-1; an explicit zero_stage must agree.
    EXPECT_EQ(dist("  zero_stage: 2\n  smdistributed: {modelparallel: {enabled: true, "
                   "parameters: {shard_optimizer_state: true}}}\n")
                  .zero_stage,
              2);
    EXPECT_EQ(expect_job_error(std::string(k_min_job) + "distribution:\n  zero_stage: 0\n" +
                                   smp.substr(std::string("distribution:\n").size()) +
                                   "        shard_optimizer_state: true\n",
                               {}),
              "job.yaml:11: distribution.smdistributed.modelparallel.parameters."
              "shard_optimizer_state: true disagrees with distribution.zero_stage: 0 "
              "(job.yaml:6); SMP's optimizer-state sharding is ZeRO stage 1: keep one of them");
    // SMP's fp16 is hyperparameters.fp16.
    EXPECT_EQ(expect_job_error(std::string(k_min_job) + "hyperparameters:\n  fp16: false\n" + smp +
                                   "        fp16: true\n",
                               {}),
              "job.yaml:12: distribution.smdistributed.modelparallel.parameters.fp16: true "
              "disagrees with hyperparameters.fp16: false (job.yaml:6): keep one of them");
}

TEST(DistributionYaml, BadValuesNameTheKey) {
    auto err = [](const std::string& block, const std::vector<std::string>& pieces) {
        expect_job_error(std::string(k_min_job) + "distribution:\n" + block, pieces);
    };
    err("  zero_stage: 3\n", {"job.yaml:6:", "distribution.zero_stage", "ZeRO-3"});
    err("  tensor_parallel_degree: 0\n", {"job.yaml:6:", "must be >= 1"});
    err("  placement_strategy: DDT\n", {"job.yaml:6:", "permutation of D, P, T"});
    err("  pipeline: interleaved\n", {"virtual_stages >= 2"});
    err("  pipeline: interleaved\n  virtual_stages: 2\n  pipeline_parallel_degree: 2\n"
        "  microbatches: 3\n",
        {"job.yaml:9:", "multiple of pipeline_parallel_degree"});
    err("  virtual_stages: 2\n", {"needs pipeline: interleaved"});
    err("  offload_activations: true\n", {"job.yaml:6:", "needs activation_checkpointing"});
    err("  pipeline_parallel_degree: 2\n  partition: [1, 2, 3]\n",
        {"job.yaml:7:", "has 3 entries but pipeline_parallel_degree is 2"});
    err("  pipeline: gpipe\n", {"job.yaml:6:", "'gpipe' is not a valid value"});
    err("  zero_stag: 1\n", {"did you mean 'zero_stage'?"});
    err("  partition: {a: 1}\n", {"expected a list of transformer blocks"});
}

}  // namespace
}  // namespace loom
