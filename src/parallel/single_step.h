// SingleStep: the StepEngine of one process holding the whole model (no data,
// tensor or pipeline parallelism): the micro-batches in order, no reduction,
// the job's optimizer (AdamW, LAMB or SGD) over the flat buffers. It sees the
// model through StageModel (parallel/stage_model.h), as the other engines do.
#pragma once

#include <vector>

#include "optim/flat_optimizer.h"
#include "optim/optimizer.h"
#include "parallel/pending_scale.h"
#include "parallel/stage_model.h"
#include "parallel/step_engine.h"

namespace loom {

class SingleStep : public StepEngine {
  public:
    // model and optimizer must outlive this object.
    SingleStep(StageModel& model, Optimizer& optimizer) : model_(model), optimizer_(optimizer) {}

    void begin_step() override {
        model_.zero_grad();
        pending_.reset();
    }
    double run(const std::vector<MicroBatch>& micro, double loss_scale) override;
    // One process: the gradients are final when backward returns.
    void finalize_grads() override {}
    void scale_grads(float s) override;
    double clip_grad_norm(double max_norm) override;
    void step(double lr) override;

  private:
    // Gradients narrower than f32 (a GPU's bf16 or fp16): unscaling and
    // clipping go into pending_ (parallel/pending_scale.h).
    bool defer_scaling() const;

    StageModel& model_;
    Optimizer& optimizer_;
    PendingScale pending_;
};

}  // namespace loom
