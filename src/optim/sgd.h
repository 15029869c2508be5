// SGD as the HF Trainer builds it for optim: sgd (torch.optim.SGD with the
// learning rate and per-group weight decay, no momentum):
//   g = grad + wd * p     (wd: decaying rows only; biases and LayerNorm get 0)
//   p = p - lr * g
// Stateless, so its checkpoint holds only the step count. Frozen rows are
// never touched.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nn/param_table.h"
#include "optim/adamw.h"
#include "optim/optimizer.h"

namespace loom {

class Sgd : public Optimizer {
  public:
    Sgd(ParamTable& table, double weight_decay, DecayPolicy decay = DecayPolicy::table);

    void step(double lr) override;
    int64_t step_count() const override { return step_; }
    std::map<std::string, Tensor> state_tensors() const override { return {}; }
    void load_state(const std::map<std::string, Tensor>& state, int64_t step) override;

  private:
    ParamTable& table_;
    double weight_decay_;
    std::vector<char> decays_;  // (rows)
    int64_t step_ = 0;
};

}  // namespace loom
