// Job::notes: the run's precision, and one line for every key that was
// accepted but changes nothing in the job, saying why.
#include <gtest/gtest.h>

#include <algorithm>

#include "job_test_util.h"

namespace loom {
namespace {

using test::k_min_job;
using test::parse_job;

std::string all_notes(const Job& job) {
    std::string s;
    for (const auto& n : job.notes) s += "\n  " + n;
    return s;
}

#define EXPECT_NOTE(job, text)                                                      \
    EXPECT_NE(std::find((job).notes.begin(), (job).notes.end(), std::string(text)), \
              (job).notes.end())                                                    \
        << "missing note: " << (text) << "\nnotes:" << all_notes(job)

TEST(JobNotes, PrecisionIsAlwaysLogged) {
    Job fp32 = parse_job(k_min_job);
    ASSERT_FALSE(fp32.notes.empty());
    EXPECT_EQ(fp32.notes.front(), "precision: fp32 (hyperparameters.bf16 and fp16 are off)");
    EXPECT_EQ(parse_job(std::string(k_min_job) + "hyperparameters: {bf16: true}\n").notes.front(),
              "precision: bf16 mixed precision (hyperparameters.bf16): bf16 GEMM operands with "
              "fp32 accumulation; fp32 master weights and optimizer state");
    EXPECT_EQ(parse_job(std::string(k_min_job) + "hyperparameters: {fp16: true}\n").notes.front(),
              "precision: fp16 mixed precision (hyperparameters.fp16) with dynamic loss scaling "
              "(from 65536, halved and the step skipped on an inf/NaN gradient, doubled after "
              "2000 clean steps); fp32 master weights and optimizer state (on the CPU, GEMM "
              "operands and results are rounded to fp16: a GPU's overflow behaviour, no speed "
              "gain)");
    // Turned on by SMP's parameter: the note names that key.
    Job smp = parse_job(std::string(k_min_job) +
                        "distribution: {smdistributed: {modelparallel: {enabled: true, "
                        "parameters: {fp16: true}}}}\n");
    EXPECT_TRUE(smp.training.fp16);
    EXPECT_EQ(smp.notes.front().rfind("precision: fp16 mixed precision "
                                      "(distribution.smdistributed.modelparallel.parameters.fp16) "
                                      "with dynamic loss scaling",
                                      0),
              0u)
        << smp.notes.front();
}

TEST(JobNotes, SmpParametersWithoutEffectSayWhy) {
    const std::string p = "distribution.smdistributed.modelparallel.parameters.";
    Job job = parse_job(std::string(k_min_job) + R"(distribution:
  smdistributed:
    modelparallel:
      enabled: true
      parameters:
        partitions: 2
        optimize: speed
        skip_tracing: true
        ddp_port: 1234
        tensor_parallel_seed: 7
)");
    EXPECT_NOTE(job, p + "optimize: 'speed' has no effect in Loom: its tensor parallelism has "
                         "one layout, SMP's 'speed' (LayerNorms and their activations kept whole "
                         "on every tensor-parallel rank)");
    EXPECT_NOTE(job, p + "skip_tracing: 'true' has no effect in Loom: it does not trace the "
                         "model; the stages are planned from config.json");
    EXPECT_NOTE(job, p + "ddp_port: '1234' has no effect in Loom: data-parallel traffic goes "
                         "over MPI (NCCL on GPUs, set up through MPI), so there is no port or "
                         "backend to choose");
    EXPECT_NOTE(job, p + "tensor_parallel_seed: '7' has no effect in Loom: dropout is keyed by "
                         "hyperparameters.seed and the global element index, the same on every "
                         "tensor-parallel rank, so there is no per-rank seed");
    // Values are still checked.
    test::expect_job_error(std::string(k_min_job) +
                               "distribution: {smdistributed: {modelparallel: {enabled: true, "
                               "parameters: {optimize: fast}}}}\n",
                           {"optimize: expected 'speed' or 'memory', got 'fast'"});
    // Disabled: one note for the whole block, none per parameter.
    Job off = parse_job(std::string(k_min_job) +
                        "distribution: {smdistributed: {modelparallel: {parameters: {partitions: "
                        "2, optimize: speed}}}}\n");
    EXPECT_NOTE(off,
                "distribution.smdistributed.modelparallel.parameters: checked but not "
                "applied, because distribution.smdistributed.modelparallel.enabled is not "
                "true");
    EXPECT_EQ(off.notes.size(), 2u) << all_notes(off);  // and the precision
}

TEST(JobNotes, LauncherBlocksThatCannotStartAnything) {
    Job job = parse_job(std::string(k_min_job) + R"(distribution:
  mpi: {enabled: true, custom_mpi_options: "-x NCCL_DEBUG=INFO"}
  torch_distributed: {enabled: true}
)");
    EXPECT_NOTE(job,
                "distribution.mpi.custom_mpi_options: '-x NCCL_DEBUG=INFO': loom launch passes "
                "them to mpirun; ranks started another way (mpirun or srun directly) are "
                "already running, so give them to that mpirun yourself");
    EXPECT_NOTE(job,
                "distribution.torch_distributed.enabled: 'true' has no effect in Loom: "
                "ranks are started by loom launch, mpirun or srun (not torchrun) and talk "
                "over MPI, NCCL on GPUs");
    EXPECT_TRUE(job.distribution.mpi_enabled);
}

TEST(JobNotes, HuggingFaceKeysThatAnotherKeyOverrides) {
    Job job = parse_job(std::string(k_min_job) + R"(hyperparameters:
  num_train_epochs: 3
  max_steps: 100
  warmup_ratio: 0.1
  warmup_steps: 10
  logging_strategy: epoch
  logging_steps: 50
  save_strategy: 'no'
  save_steps: 200
  early_stopping_threshold: 0.01
  lr_scheduler_kwargs: {power: 2}
)");
    EXPECT_NOTE(job,
                "hyperparameters.num_train_epochs: 3 has no effect: max_steps (100) sets the "
                "length of training, as in Hugging Face");
    EXPECT_NOTE(job,
                "hyperparameters.warmup_ratio: 0.1 has no effect: warmup_steps (10) is used "
                "instead, as in Hugging Face");
    EXPECT_NOTE(job,
                "hyperparameters.logging_steps: 50 has no effect: logging_strategy is "
                "'epoch'");
    EXPECT_NOTE(job, "hyperparameters.save_steps: 200 has no effect: save_strategy is 'no'");
    EXPECT_NOTE(job,
                "hyperparameters.early_stopping_threshold: 0.01 has no effect: "
                "early_stopping_patience is 0 (no early stopping)");
    EXPECT_NOTE(job,
                "hyperparameters.lr_scheduler_kwargs.power: 2 has no effect: only the "
                "polynomial schedule reads it (lr_scheduler_type is 'linear')");
    // Defaults that were not written are not noted.
    EXPECT_EQ(parse_job(k_min_job).notes.size(), 1u) << all_notes(parse_job(k_min_job));
}

TEST(JobNotes, DataKeysOfOtherTasks) {
    Job job = parse_job(
        "model: m\ntask: causal-lm\ndata: {train: t.jsonl, mlm_probability: 0.2, "
        "label_column: y, sample_by: paragraph}\n");
    EXPECT_NOTE(job,
                "data.mlm_probability: 0.2 has no effect: only masked-lm reads it (task is "
                "causal-lm)");
    EXPECT_NOTE(job,
                "data.label_column: y has no effect: only sequence-classification reads it "
                "(task is causal-lm)");
    EXPECT_NOTE(job,
                "data.sample_by: paragraph has no effect: it splits plain-text files (.txt, "
                ".text), and the data is JSONL, JSON or CSV/TSV");
    // On text (or a folder that may hold text) sample_by applies.
    Job text = parse_job("model: m\ntask: causal-lm\ndata: {train: t.txt, sample_by: paragraph}\n");
    EXPECT_EQ(text.notes.size(), 1u) << all_notes(text);
}

TEST(JobNotes, DistributionSettingsWithoutTheirFeature) {
    Job job = parse_job(std::string(k_min_job) +
                        "distribution: {microbatches: 4, checkpoint_every: 2, pipeline: simple}\n");
    EXPECT_NOTE(job,
                "distribution.microbatches: 4 has no effect: there is no pipeline or tensor "
                "parallelism (pipeline_parallel_degree and tensor_parallel_degree are 1); "
                "hyperparameters.gradient_accumulation_steps splits a batch on one rank");
    EXPECT_NOTE(job,
                "distribution.pipeline: simple has no effect: there is no pipeline or "
                "tensor parallelism (pipeline_parallel_degree and tensor_parallel_degree "
                "are 1)");
    EXPECT_NOTE(job,
                "distribution.checkpoint_every: 2 has no effect: activation_checkpointing "
                "is off");
    // With a pipeline they act, and say nothing.
    Job pp = parse_job(std::string(k_min_job) +
                       "distribution: {pipeline_parallel_degree: 2, microbatches: 4}\n");
    EXPECT_EQ(pp.notes.size(), 1u) << all_notes(pp);
}

}  // namespace
}  // namespace loom
