// AdamW: segments of equal weight decay over the flat buffers, one kernel call each.
#include "optim/adamw.h"

#include <cstring>

#include "core/check.h"

namespace loom {

AdamW::AdamW(ParamTable& table, const AdamWParams& hp, DecayPolicy decay)
    : table_(table), hp_(hp) {
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
        if (extend && segments_.back().decay == d) {
            Segment& s = segments_.back();
            s.n = r.offset + r.numel() - s.offset;
        } else {
            segments_.push_back({r.offset, r.numel(), d});
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
    float* m = static_cast<float*>(m_->data());
    float* v = static_cast<float*>(v_->data());
    for (const Segment& s : segments_) {
        AdamWParams shp = hp;
        if (!s.decay) shp.weight_decay = 0.0;
        adamw_update(p + s.offset, g + s.offset, m + s.offset, v + s.offset, s.n, shp, step_);
    }
}

std::map<std::string, Tensor> AdamW::state_tensors() const {
    std::map<std::string, Tensor> out;
    for (const ParamRow& r : table_.rows()) {
        if (!r.trainable) continue;
        const size_t off = size_t(r.offset) * sizeof(float);
        out["exp_avg." + r.name] = Tensor::view_of(m_, off, DType::f32, r.shape, "exp_avg." + r.name);
        out["exp_avg_sq." + r.name] =
            Tensor::view_of(v_, off, DType::f32, r.shape, "exp_avg_sq." + r.name);
    }
    return out;
}

void AdamW::load_state(const std::map<std::string, Tensor>& state, int64_t step) {
    LOOM_CHECK(step >= 0, "optimizer state: negative step {}", step);
    for (const ParamRow& r : table_.rows()) {
        if (!r.trainable) continue;
        for (const char* kind : {"exp_avg.", "exp_avg_sq."}) {
            const std::string key = kind + r.name;
            auto it = state.find(key);
            LOOM_CHECK(it != state.end(), "optimizer state: missing tensor '{}'", key);
            LOOM_CHECK(it->second.dtype == DType::f32 && it->second.shape == r.shape,
                       "optimizer state: tensor '{}' is {} {}, expected F32 {}", key,
                       dtype_safetensors_name(it->second.dtype), it->second.shape.to_string(),
                       r.shape.to_string());
            auto& dst = std::string(kind) == "exp_avg." ? m_ : v_;
            std::memcpy(static_cast<float*>(dst->data()) + r.offset, it->second.raw(),
                        size_t(r.numel()) * sizeof(float));
        }
    }
    step_ = step;
}

}  // namespace loom
