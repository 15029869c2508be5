// SGD as the HF Trainer builds it for optim: sgd (torch.optim.SGD with the
// learning rate and per-group weight decay, no momentum):
//   g = grad + wd * p     (wd: decaying rows only; biases and LayerNorm get 0)
//   p = p - lr * g
// Stateless, so its checkpoint holds only the step count. Frozen rows are
// never touched. This is FlatOptimizer on the CPU backend (ops/sgd.h).
#pragma once

#include "nn/param_table.h"
#include "optim/adamw.h"
#include "optim/flat_optimizer.h"

namespace loom {

class Sgd : public FlatOptimizer {
  public:
    Sgd(ParamTable& table, double weight_decay, DecayPolicy decay = DecayPolicy::table);
};

}  // namespace loom
