// LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning"), the
// optimizer ALBERT and large-batch BERT pretraining use, over the flat
// parameter/gradient buffers. Per parameter tensor (one ParamTable row), step t:
//   m = b1*m + (1-b1)*g ;  v = b2*v + (1-b2)*g*g
//   mh = m / (1 - b1^t) ;  vh = v / (1 - b2^t)     (bias_correction; else m, v)
//   u  = mh / (sqrt(vh) + eps) + wd*p               (wd: decaying rows only)
//   r  = ||p|| / ||u||  when both norms are > 0, else 1   (trust ratio)
//   p  = p - lr * r * u
// Excluded rows (ParamRow::decay false: biases and LayerNorm weights, the
// `exclude_from_weight_decay` and `exclude_from_layer_adaptation` lists of
// ALBERT's lamb_optimizer.py) get neither weight decay nor the trust ratio
// (r = 1), so they take a plain Adam step. With DecayPolicy::all every
// trainable row decays and adapts. Frozen rows are never touched.
//
// The norms are per whole tensor, so this is not elementwise: a ZeRO shard of
// the flat buffer could not update alone without the norms of every tensor it
// cuts (not done here). Warmup and decay of the learning rate come from the
// schedule (optim/lr_schedule.h) through step(lr).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/storage.h"
#include "nn/param_table.h"
#include "optim/adamw.h"
#include "optim/optimizer.h"

namespace loom {

struct LambParams {
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-6, weight_decay = 0.01;
    bool bias_correction = true;  // false: ALBERT's TF lamb_optimizer.py (no correction)
};

// What the last step did to one row (tests, logs).
struct LambRowStats {
    double param_norm = 0, update_norm = 0, trust_ratio = 1;
};

class Lamb : public Optimizer {
  public:
    Lamb(ParamTable& table, const LambParams& hp, DecayPolicy decay = DecayPolicy::table);

    void step(double lr) override;
    int64_t step_count() const override { return step_; }
    const LambParams& hyperparams() const { return hp_; }
    // Per table row, from the last step (trust_ratio 1 for excluded rows).
    const std::vector<LambRowStats>& last_stats() const { return stats_; }

    // The moments under torch's names ("exp_avg.<name>", "exp_avg_sq.<name>").
    std::map<std::string, Tensor> state_tensors() const override;
    void load_state(const std::map<std::string, Tensor>& state, int64_t step) override;

  private:
    ParamTable& table_;
    LambParams hp_;
    std::vector<char> adapt_;          // (rows) 1 = weight decay and trust ratio apply
    std::vector<LambRowStats> stats_;  // (rows)
    std::shared_ptr<Storage> m_, v_;   // (flat_numel) each
    int64_t step_ = 0;
};

}  // namespace loom
