// Plain SGD with coupled weight decay (torch.optim.SGD, momentum 0).
#include "optim/sgd.h"

#include "core/check.h"

namespace loom {

Sgd::Sgd(ParamTable& table, double weight_decay, DecayPolicy decay)
    : table_(table), weight_decay_(weight_decay) {
    LOOM_ASSERT(table.allocated(), "SGD over an unallocated parameter table");
    LOOM_CHECK(weight_decay >= 0, "sgd: weight_decay must be >= 0, got {}", weight_decay);
    for (const ParamRow& r : table.rows()) decays_.push_back(decay == DecayPolicy::all || r.decay);
}

void Sgd::step(double lr) {
    ++step_;
    float* params = table_.params_data();
    const float* grads = table_.grads_data();
    const float lrf = float(lr);
    for (size_t ri = 0; ri < table_.rows().size(); ++ri) {
        const ParamRow& r = table_.rows()[ri];
        if (!r.trainable) continue;
        const float wd = decays_[ri] ? float(weight_decay_) : 0.0f;
        float* p = params + r.offset;
        const float* g = grads + r.offset;
        const int64_t n = r.numel();
#pragma omp parallel for schedule(static) if (n > (1 << 16))
        for (int64_t i = 0; i < n; ++i) p[i] -= lrf * (g[i] + wd * p[i]);
    }
}

void Sgd::load_state(const std::map<std::string, Tensor>& state, int64_t step) {
    LOOM_CHECK(state.empty(),
               "sgd: the checkpoint holds optimizer state ({} ...): it was saved by another "
               "optimizer (hyperparameters.optim must match the checkpoint's)",
               state.empty() ? "" : state.begin()->first);
    LOOM_CHECK(step >= 0, "sgd: negative step count {} in the checkpoint", step);
    step_ = step;
}

}  // namespace loom
