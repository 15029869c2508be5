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
// The norms are per whole tensor: each is a fixed-order sum of per-tile
// partial sums (ops/lamb.h), so it does not depend on the thread count, and a
// ZeRO shard sums its partial norms over dp (optim/flat_optimizer.h). Warmup
// and decay of the learning rate come from the schedule (optim/lr_schedule.h)
// through step(lr). This is FlatOptimizer on the CPU backend.
#pragma once

#include <vector>

#include "nn/param_table.h"
#include "optim/adamw.h"
#include "optim/flat_optimizer.h"

namespace loom {

struct LambParams {
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-6, weight_decay = 0.01;
    bool bias_correction = true;  // false: ALBERT's TF lamb_optimizer.py (no correction)
};

// What the last step did to one row (tests, logs).
struct LambRowStats {
    double param_norm = 0, update_norm = 0, trust_ratio = 1;
};

class Lamb : public FlatOptimizer {
  public:
    Lamb(ParamTable& table, const LambParams& hp, DecayPolicy decay = DecayPolicy::table);

    void step(double lr) override;
    const LambParams& hyperparams() const { return hp_; }
    // Per table row, from the last step (trust_ratio 1 for excluded rows).
    const std::vector<LambRowStats>& last_stats() const { return stats_; }

  private:
    LambParams hp_;
    std::vector<char> adapt_;          // (rows) 1 = weight decay and trust ratio apply
    std::vector<LambRowStats> stats_;  // (rows)
};

}  // namespace loom
