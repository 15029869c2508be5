// Optimizer: what the trainer needs from an optimizer over a ParamTable's
// flat buffers (AdamW, Lamb), so the step and the checkpoint code do not
// depend on which one the job chose.
//
// Invariant: state_tensors() is layout-free (keyed by parameter name, torch's
// state names), so load_state() restores it into any optimizer of the same
// kind over a table with the same rows.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/tensor.h"

namespace loom {

// The optimizers, one enum for the job file, the CPU and the GPU updates.
enum class OptimizerKind { adamw, lamb, sgd };

class Optimizer {
  public:
    virtual ~Optimizer() = default;
    // One update with learning rate `lr` (the schedule's value for this step).
    virtual void step(double lr) = 0;
    virtual int64_t step_count() const = 0;
    virtual std::map<std::string, Tensor> state_tensors() const = 0;
    virtual void load_state(const std::map<std::string, Tensor>& state, int64_t step) = 0;
};

}  // namespace loom
