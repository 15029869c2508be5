// SingleStep: the StepEngine of one process holding the whole model (no data,
// tensor or pipeline parallelism): the micro-batches in order, no reduction,
// the job's optimizer (AdamW, LAMB or SGD) over the flat buffers.
#pragma once

#include <vector>

#include "models/model.h"
#include "optim/optimizer.h"
#include "parallel/step_engine.h"

namespace loom {

class SingleStep : public StepEngine {
  public:
    // model and optimizer must outlive this object.
    SingleStep(Model& model, Optimizer& optimizer) : model_(model), optimizer_(optimizer) {}

    void begin_step() override { model_.zero_grad(); }
    double run(const std::vector<MicroBatch>& micro, double loss_scale) override;
    // One process: the gradients are final when backward returns.
    void finalize_grads() override {}
    void scale_grads(float s) override;
    double clip_grad_norm(double max_norm) override;
    void step(double lr) override { optimizer_.step(lr); }

  private:
    Model& model_;
    Optimizer& optimizer_;
};

}  // namespace loom
