// StepEngines: the one place that turns a layout into its step engine
// (step_engine.h). The caller describes the layout once (EngineSpec: the
// groups, the pipeline schedule, the data-parallel options, the optimizer,
// the model or the stage models, on whichever backend their tables live);
// build_step_engines picks the engine and builds it ready to step.
//
// Which engine, in this order:
//   pipeline or tensor parallel (pp > 1 or tp > 1): PipelineParallel over
//     the stage models (tp with pp 1 rides on a one-stage pipeline);
//   dp > 1: DataParallel over the one model;
//   otherwise: SingleStep with the optimizer over the model's flat buffers.
// Replicas start from dp rank 0's parameters: the engines broadcast them when
// built.
//
// Invariant: the owner holds exactly one engine that steps (engine()); the
// rest is typed access to what the caller still needs of it (the pipeline's
// gathers and per-stage counts, the data-parallel memory plan, the host
// optimizer's checkpoint state). Building is collective over the groups, in
// the same order on every rank. It does not read the job file, load weights
// or write notes: the trainer does that around it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/comm.h"
#include "core/schedule_kind.h"
#include "optim/flat_optimizer.h"
#include "parallel/dp_step.h"
#include "parallel/pipeline_parallel.h"
#include "parallel/single_step.h"
#include "parallel/stage_model.h"
#include "parallel/step_engine.h"

namespace loom {

enum class EngineKind { single, data_parallel, pipeline };
std::string_view engine_kind_name(EngineKind kind);

struct EngineSpec {
    // The groups; null or one rank: that axis is absent. Pipeline and tensor
    // parallelism need dp and pp both (one rank each where unused).
    Communicator* dp = nullptr;
    Communicator* pp = nullptr;
    // The pp group over the stage models' backend memory (NCCL for a GPU),
    // for the activations between stages; null: pp.
    Communicator* pp_buffers = nullptr;
    Communicator* tp = nullptr;  // the stage models are already built for its slice
    ScheduleKind schedule = ScheduleKind::one_f_one_b;
    int virtual_stages = 1;  // interleaved schedule: model chunks per rank
    DpOptions dp_options;    // ZeRO stage, buckets, overlap, sparse embedding rows
    OptimizerConfig optimizer;
    // One process or data parallel: the whole model (the caller's; it must
    // outlive the StepEngines).
    StageModel* model = nullptr;
    // Pipeline or tensor parallel: this rank's instances, n_virtual chunks x
    // the same number each (PipelineParallel's constructor), taken over.
    std::vector<std::unique_ptr<StageModel>> stage_models;

    // pp > 1 or tp > 1: the stages run through PipelineParallel.
    bool pipelined() const { return (pp && pp->size() > 1) || (tp && tp->size() > 1); }
};

class StepEngines {
  public:
    ~StepEngines();
    StepEngines(const StepEngines&) = delete;
    StepEngines& operator=(const StepEngines&) = delete;

    EngineKind kind() const { return kind_; }
    StepEngine& engine() { return *engine_; }

    // The pipeline layout (pipeline or tensor parallel, whichever engine
    // steps); null without one.
    PipelineParallel* pipeline() { return pp_.get(); }
    const PipelineParallel* pipeline() const { return pp_.get(); }
    // The plain data-parallel engine (kind data_parallel); null otherwise
    // (a pipeline's reduction: pipeline()->data_parallel()).
    DataParallel* data_parallel() { return dp_.get(); }

    // The engine's optimizer, for checkpoints: layout-free state (collective
    // under ZeRO and pipeline: gathered for the checkpoint's writer, pipeline
    // stage 0), its step count, and loading a whole model's state.
    std::map<std::string, Tensor> optimizer_state() const;
    int64_t step_count() const;
    void load_optimizer_state(const std::map<std::string, Tensor>& state, int64_t step);

  private:
    friend std::unique_ptr<StepEngines> build_step_engines(EngineSpec spec);
    StepEngines() = default;

    EngineKind kind_ = EngineKind::single;
    std::unique_ptr<PipelineParallel> pp_;
    std::unique_ptr<DataParallel> dp_;
    std::unique_ptr<FlatOptimizer> optimizer_;  // single only
    std::unique_ptr<SingleStep> single_;
    StepEngine* engine_ = nullptr;
};

// Builds the layout's engine (collective over the spec's groups). Throws,
// naming what is missing, when the spec does not describe a layout.
std::unique_ptr<StepEngines> build_step_engines(EngineSpec spec);

}  // namespace loom
