// StepEngine: the layout's half of one optimizer step, behind one interface,
// so the trainer's step is the same code for every layout.
//
// One step, whatever the layout (single process, data parallel with ZeRO
// 0/1/2, pipeline with tp and dp):
//   e.begin_step();                        // zero the gradients
//   loss = e.run(micro, scale);            // forward/backward, grads += d(scale * loss)
//   e.finalize_grads();                    // the one place gradients are reduced
//   e.scale_grads(1 / loss_scale);         // fp16 only: unscale
//   norm = e.clip_grad_norm(max_norm);     // global norm; clips when max_norm > 0
//   e.step(lr);                            // the optimizer (sharded under ZeRO)
//
// finalize_grads does, in this order (Megatron-Core's finalize_model_grads):
// rows that several pipeline stages hold (tied embeddings) summed over pp;
// then the data-parallel reduction over dp (all-reduce, or reduce-scatter
// under ZeRO 1/2), waiting for buckets backward already launched. Losses are
// normalised by the global label count before backward (`scale`), so no
// division follows the reduction. Every call is collective over the
// layout's groups: all ranks make them in the same order.
#pragma once

#include <cstdint>
#include <vector>

#include "core/model_inputs.h"
#include "nn/module.h"

namespace loom {

// One micro-batch of a step: views owned by the caller, valid through run().
struct MicroBatch {
    ModelInputs inputs;
    DropoutPlan dropout;  // keyed by the micro-batch's first global sample
    int64_t label_count = 0;
};

class StepEngine {
  public:
    virtual ~StepEngine() = default;
    virtual void begin_step() = 0;
    // Forward and backward of the step's micro-batches, in order, each
    // backward scaled by `loss_scale`. Returns the sum of the per-example
    // losses of this replica (a pipeline's summed over its stages). An empty
    // micro-batch (B = 0: a replica's share of a short last batch) still
    // joins every collective.
    virtual double run(const std::vector<MicroBatch>& micro, double loss_scale) = 0;
    virtual void finalize_grads() = 0;
    virtual void scale_grads(float s) = 0;
    virtual double clip_grad_norm(double max_norm) = 0;
    virtual void step(double lr) = 0;
};

}  // namespace loom
