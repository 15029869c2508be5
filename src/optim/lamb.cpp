// LAMB on the host: the flat optimizer over the CPU backend, plus the
// per-row figures of the last step (tests, logs).
#include "optim/lamb.h"

#include <cmath>

namespace loom {

namespace {

OptimizerConfig lamb_config(const LambParams& hp, DecayPolicy decay) {
    OptimizerConfig c;
    c.kind = OptimizerKind::lamb;
    c.hp = AdamWParams{hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay};
    c.lamb_bias_correction = hp.bias_correction;
    c.decay = decay;
    return c;
}

}  // namespace

Lamb::Lamb(ParamTable& table, const LambParams& hp, DecayPolicy decay)
    : FlatOptimizer(table, lamb_config(hp, decay)), hp_(hp) {
    for (const ParamRow& r : table.rows()) adapt_.push_back(decay == DecayPolicy::all || r.decay);
    stats_.resize(table.rows().size());
}

void Lamb::step(double lr) {
    FlatOptimizer::step(lr);
    const std::vector<double> sums = lamb_row_sums();
    for (size_t i = 0; i < stats_.size(); ++i) {
        LambRowStats& s = stats_[i];
        s.param_norm = std::sqrt(sums[2 * i]);
        s.update_norm = std::sqrt(sums[2 * i + 1]);
        s.trust_ratio =
            adapt_[i] && s.param_norm > 0 && s.update_norm > 0 ? s.param_norm / s.update_norm : 1.0;
    }
}

}  // namespace loom
