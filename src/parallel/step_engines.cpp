// build_step_engines and StepEngines (step_engines.h).
#include "parallel/step_engines.h"

#include <utility>

#include "core/check.h"

namespace loom {

std::string_view engine_kind_name(EngineKind kind) {
    switch (kind) {
        case EngineKind::single:
            return "single";
        case EngineKind::data_parallel:
            return "data_parallel";
        case EngineKind::pipeline:
            return "pipeline";
    }
    return "?";
}

StepEngines::~StepEngines() = default;

namespace {

void check_spec(const EngineSpec& s) {
    if (s.pipelined()) {
        LOOM_CHECK(s.dp != nullptr && s.pp != nullptr,
                   "step engines: pipeline and tensor parallelism need the dp and pp groups");
        LOOM_CHECK(!s.stage_models.empty(),
                   "step engines: pipeline and tensor parallelism need this rank's stage models");
        LOOM_CHECK(s.model == nullptr,
                   "step engines: a pipeline layout trains its stage models, not a whole model");
    } else {
        LOOM_CHECK(s.model != nullptr, "step engines: no model to train");
        LOOM_CHECK(s.stage_models.empty(),
                   "step engines: stage models given without pipeline or tensor parallelism "
                   "(pp and tp have one rank)");
    }
}

}  // namespace

std::unique_ptr<StepEngines> build_step_engines(EngineSpec spec) {
    check_spec(spec);
    std::unique_ptr<StepEngines> e(new StepEngines());
    StageModel* trained = spec.model;
    if (spec.pipelined()) {
        e->pp_ = std::make_unique<PipelineParallel>(std::move(spec.stage_models), *spec.pp,
                                                    *spec.dp, spec.optimizer, spec.dp_options,
                                                    spec.schedule, spec.virtual_stages,
                                                    spec.pp_buffers);
        // Replicas start from rank 0's parameters whatever each loaded.
        e->pp_->data_parallel().broadcast_parameters();
        trained = &e->pp_->model();
        e->kind_ = EngineKind::pipeline;
        e->engine_ = e->pp_.get();
    }
    if (e->pp_) {
        // The pipeline above.
    } else if (spec.dp && spec.dp->size() > 1) {
        e->dp_ =
            std::make_unique<DataParallel>(*trained, *spec.dp, spec.optimizer, spec.dp_options);
        e->dp_->broadcast_parameters();
        e->kind_ = EngineKind::data_parallel;
        e->engine_ = e->dp_.get();
    } else {
        e->optimizer_ = std::make_unique<FlatOptimizer>(trained->params(), spec.optimizer);
        e->single_ = std::make_unique<SingleStep>(*trained, *e->optimizer_);
        e->kind_ = EngineKind::single;
        e->engine_ = e->single_.get();
    }
    return e;
}

std::map<std::string, Tensor> StepEngines::optimizer_state() const {
    if (pp_) return pp_->gather_optimizer_state(/*to_all=*/false);
    if (dp_) return dp_->optimizer_state();
    return optimizer_->state_tensors();
}

int64_t StepEngines::step_count() const {
    if (pp_) return pp_->step_count();
    if (dp_) return dp_->step_count();
    return optimizer_->step_count();
}

void StepEngines::load_optimizer_state(const std::map<std::string, Tensor>& state, int64_t step) {
    if (pp_)
        pp_->load_optimizer_state(state, step);
    else if (dp_)
        dp_->load_optimizer_state(state, step);
    else
        optimizer_->load_state(state, step);
}

}  // namespace loom
