// LAMB: two passes per row (moments + norms, then the scaled update), norms
// accumulated in double so the trust ratio does not depend on the thread count
// beyond the reduction order of doubles. See lamb.h for the formula.
#include "optim/lamb.h"

#include <omp.h>

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "optim/moment_state.h"

namespace loom {

Lamb::Lamb(ParamTable& table, const LambParams& hp, DecayPolicy decay) : table_(table), hp_(hp) {
    LOOM_ASSERT(table.allocated(), "LAMB over an unallocated parameter table");
    LOOM_CHECK(hp.beta1 >= 0 && hp.beta1 < 1 && hp.beta2 >= 0 && hp.beta2 < 1,
               "lamb: betas must be in [0, 1), got ({}, {})", hp.beta1, hp.beta2);
    LOOM_CHECK(hp.eps > 0, "lamb: epsilon must be positive, got {}", hp.eps);
    const size_t bytes = size_t(std::max<int64_t>(table.flat_numel(), 1)) * sizeof(float);
    m_ = Storage::alloc(bytes);
    v_ = Storage::alloc(bytes);
    for (const ParamRow& r : table.rows()) adapt_.push_back(decay == DecayPolicy::all || r.decay);
    stats_.resize(table.rows().size());
}

void Lamb::step(double lr) {
    ++step_;
    const double bc1 = hp_.bias_correction ? 1.0 - std::pow(hp_.beta1, double(step_)) : 1.0;
    const double bc2 = hp_.bias_correction ? 1.0 - std::pow(hp_.beta2, double(step_)) : 1.0;
    const float b1 = float(hp_.beta1), one_minus_b1 = float(1.0 - hp_.beta1);
    const float b2 = float(hp_.beta2), one_minus_b2 = float(1.0 - hp_.beta2);
    const float inv_bc1 = float(1.0 / bc1), inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
    const float eps = float(hp_.eps);
    float* params = table_.params_data();
    const float* grads = table_.grads_data();
    float* ms = static_cast<float*>(m_->data());
    float* vs = static_cast<float*>(v_->data());

    for (size_t ri = 0; ri < table_.rows().size(); ++ri) {
        const ParamRow& r = table_.rows()[ri];
        if (!r.trainable) continue;
        const bool adapt = adapt_[ri];
        const float wd = adapt ? float(hp_.weight_decay) : 0.0f;
        float* p = params + r.offset;
        const float* g = grads + r.offset;
        float* m = ms + r.offset;
        float* v = vs + r.offset;
        const int64_t n = r.numel();
        // u = mh / (sqrt(vh) + eps) + wd * p, recomputed in the second pass
        // from the stored moments rather than kept in a buffer of its own.
        auto update = [&](int64_t i) {
            return (m[i] * inv_bc1) / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps) + wd * p[i];
        };
        double p_sq = 0, u_sq = 0;
#pragma omp parallel for schedule(static) reduction(+ : p_sq, u_sq) if (n > (1 << 15))
        for (int64_t i = 0; i < n; ++i) {
            m[i] = b1 * m[i] + one_minus_b1 * g[i];
            v[i] = b2 * v[i] + one_minus_b2 * g[i] * g[i];
            const double u = update(i);
            p_sq += double(p[i]) * p[i];
            u_sq += u * u;
        }
        LambRowStats& s = stats_[ri];
        s.param_norm = std::sqrt(p_sq);
        s.update_norm = std::sqrt(u_sq);
        s.trust_ratio =
            adapt && s.param_norm > 0 && s.update_norm > 0 ? s.param_norm / s.update_norm : 1.0;
        const float scale = float(lr * s.trust_ratio);
#pragma omp parallel for schedule(static) if (n > (1 << 15))
        for (int64_t i = 0; i < n; ++i) p[i] -= scale * update(i);
    }
}

std::map<std::string, Tensor> Lamb::state_tensors() const {
    return moment_state_tensors(table_, m_, v_);
}

void Lamb::load_state(const std::map<std::string, Tensor>& state, int64_t step) {
    LOOM_CHECK(step >= 0, "LAMB state: negative step {}", step);
    load_moment_state(table_, state, *m_, *v_, "LAMB");
    step_ = step;
}

}  // namespace loom
