// AdamW: segments of equal weight decay over the flat buffers, one kernel call each.
#include "optim/adamw.h"

#include <cstring>

#include "core/check.h"
#include "optim/moment_state.h"

namespace loom {

AdamW::AdamW(ParamTable& table, const AdamWParams& hp, DecayPolicy decay) : table_(table), hp_(hp) {
    LOOM_ASSERT(table.allocated(), "AdamW over an unallocated parameter table");
    const size_t bytes = size_t(std::max<int64_t>(table.flat_numel(), 1)) * sizeof(float);
    m_ = Storage::alloc(bytes);
    v_ = Storage::alloc(bytes);
    // Merge neighbouring rows with the same decay flag. Alignment gaps between
    // them hold zero params and zero grads, which the update leaves at zero.
    // A frozen row ends a run, so no segment ever covers it.
    bool extend = false;
    for (const ParamRow& r : table.rows()) {
        if (!r.trainable) {
            extend = false;
            continue;
        }
        const bool d = decay == DecayPolicy::all || r.decay;
        if (extend && runs_.back().decay == d) {
            AdamWRun& s = runs_.back();
            s.n = r.offset + r.numel() - s.param_offset;
        } else {
            runs_.push_back({r.offset, r.offset, r.numel(), d});
        }
        extend = true;
    }
}

void AdamW::step(double lr) {
    ++step_;
    AdamWParams hp = hp_;
    hp.lr = lr;
    float* p = table_.params_data();
    const float* g = table_.grads_data();
    adamw_update_runs(p, g, static_cast<float*>(m_->data()), static_cast<float*>(v_->data()), runs_,
                      hp, step_);
}

std::map<std::string, Tensor> AdamW::state_tensors() const {
    return moment_state_tensors(table_, m_, v_);
}

void AdamW::load_state(const std::map<std::string, Tensor>& state, int64_t step) {
    LOOM_CHECK(step >= 0, "optimizer state: negative step {}", step);
    load_moment_state(table_, state, *m_, *v_, "optimizer");
    step_ = step;
}

}  // namespace loom
