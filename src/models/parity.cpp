// Parity comparisons for `loom forward --compare` and the demo.
#include "models/parity.h"

#include <algorithm>
#include <cmath>

namespace loom {

namespace {

template <typename TolOf>
TensorDiff compare_impl(const std::string& name, const Tensor& x, const Tensor& ref, TolOf tol_of) {
    TensorDiff d;
    d.name = name;
    if (x.shape != ref.shape || x.dtype != DType::f32 || ref.dtype != DType::f32) {
        d.n_bad = -1;
        return d;
    }
    const float* a = x.data<float>();
    const float* r = ref.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
        const double diff = std::fabs(double(a[i]) - double(r[i]));
        d.max_abs = std::max(d.max_abs, std::isnan(diff) ? INFINITY : diff);
        const Tolerance t = tol_of(i);
        if (!(diff <= t.atol + t.rtol * std::fabs(double(r[i])))) {
            if (d.first_bad < 0) {
                d.first_bad = i;
                d.bad_value = a[i];
                d.bad_ref = r[i];
            }
            ++d.n_bad;
        }
    }
    return d;
}

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

}  // namespace

TensorDiff compare_tensor(const std::string& name, const Tensor& x, const Tensor& ref,
                          const Tolerance& tol) {
    return compare_impl(name, x, ref, [&](int64_t) { return tol; });
}

TensorDiff compare_after_adamw(const std::string& name, const Tensor& x, const Tensor& ref,
                               const Tensor& ref_grad) {
    if (ref_grad.shape != ref.shape) return compare_tensor(name, x, ref, {2e-3, 0});
    const float* g = ref_grad.data<float>();
    return compare_impl(name, x, ref, [&](int64_t i) {
        return std::fabs(g[i]) >= 1e-6f ? Tolerance{1e-4, 0} : Tolerance{2e-3, 0};
    });
}

ParitySummary compare_with_reference(const std::map<std::string, Tensor>& results,
                                     const std::map<std::string, Tensor>& expected,
                                     const std::map<std::string, Tensor>& after_expected) {
    ParitySummary s;
    bool have_grads = false, have_after = false;
    for (const auto& [k, v] : results) {
        have_grads = have_grads || starts_with(k, "grad.");
        have_after = have_after || starts_with(k, "after.");
    }
    auto record = [&](const TensorDiff& d, double& group) {
        ++s.checked;
        group = std::max(group, d.n_bad < 0 ? INFINITY : d.max_abs);
        if (!d.ok()) s.failures.push_back(d);
    };
    auto missing = [&](const std::string& k) {
        TensorDiff d;
        d.name = k;
        d.n_bad = -1;
        s.failures.push_back(d);
    };
    for (const auto& [k, ref] : expected) {
        const bool is_grad = starts_with(k, "grad.");
        if (is_grad && !have_grads) continue;
        auto it = results.find(k);
        if (it == results.end()) {
            missing(k);
            continue;
        }
        if (k == "loss") record(compare_tensor(k, it->second, ref, k_tol_loss), s.loss);
        else if (is_grad) record(compare_tensor(k, it->second, ref, k_tol_grad), s.grads);
        else if (starts_with(k, "hidden_states.")) record(compare_tensor(k, it->second, ref, k_tol_logits), s.hidden);
        else record(compare_tensor(k, it->second, ref, k_tol_logits), s.logits);
    }
    if (have_after) {
        for (const auto& [name, ref] : after_expected) {
            const std::string k = "after." + name;
            auto it = results.find(k);
            auto g = expected.find("grad." + name);
            if (it == results.end() || g == expected.end()) {
                missing(k);
                continue;
            }
            record(compare_after_adamw(k, it->second, ref, g->second), s.after);
        }
    }
    return s;
}

}  // namespace loom
