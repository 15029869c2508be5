// Moments <-> layout-free checkpoint tensors (moment_state.h).
#include "optim/moment_state.h"

#include <cstring>

#include "core/check.h"

namespace loom {

std::map<std::string, Tensor> moment_state_tensors(const ParamTable& table,
                                                   const std::shared_ptr<Storage>& m,
                                                   const std::shared_ptr<Storage>& v,
                                                   int64_t base) {
    std::map<std::string, Tensor> out;
    for (const ParamRow& r : table.rows()) {
        if (!r.trainable || !r.local) continue;
        const size_t off = size_t(r.offset - base) * sizeof(float);
        out["exp_avg." + r.name] =
            Tensor::view_of(m, off, DType::f32, r.shape, "exp_avg." + r.name);
        out["exp_avg_sq." + r.name] =
            Tensor::view_of(v, off, DType::f32, r.shape, "exp_avg_sq." + r.name);
    }
    return out;
}

void load_moment_state(const ParamTable& table, const std::map<std::string, Tensor>& state,
                       Storage& m, Storage& v, const char* what) {
    for (const ParamRow& r : table.rows()) {
        if (!r.trainable) continue;
        for (auto [kind, dst] : {std::pair{"exp_avg.", &m}, std::pair{"exp_avg_sq.", &v}}) {
            const std::string key = kind + r.name;
            auto it = state.find(key);
            LOOM_CHECK(it != state.end(), "{} state: missing tensor '{}'", what, key);
            LOOM_CHECK(it->second.dtype == DType::f32 && it->second.shape == r.shape,
                       "{} state: tensor '{}' is {} {}, expected F32 {}", what, key,
                       dtype_safetensors_name(it->second.dtype), it->second.shape.to_string(),
                       r.shape.to_string());
            std::memcpy(static_cast<float*>(dst->data()) + r.offset, it->second.raw(),
                        size_t(r.numel()) * sizeof(float));
        }
    }
}

}  // namespace loom
