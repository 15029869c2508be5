// Parity checks against reference tensors (Hugging Face fixtures): elementwise
// |x - ref| <= atol + rtol * |ref|, reporting the largest difference and the
// first failing element, as llm.c's check_tensor does.
//
// Used by `loom forward --compare` and scripts/demo. The tolerances are the
// fixtures' suggested ones (tests/data/hf/README.md).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace loom {

struct Tolerance {
    double atol = 0, rtol = 0;
};

struct TensorDiff {
    std::string name;
    double max_abs = 0;      // max |x - ref|
    int64_t n_bad = 0;       // elements outside tolerance
    int64_t first_bad = -1;  // flat index of the first one
    double bad_value = 0, bad_ref = 0;
    bool ok() const { return n_bad == 0; }
};

// Compares two float tensors of the same shape (a shape mismatch is a failure
// with n_bad = -1). `tol_of(i)` may vary per element: see after-AdamW below.
TensorDiff compare_tensor(const std::string& name, const Tensor& x, const Tensor& ref,
                          const Tolerance& tol);

// HF-fixture tolerances.
inline constexpr Tolerance k_tol_logits{1e-5, 1e-4};
inline constexpr Tolerance k_tol_loss{1e-5, 1e-5};
inline constexpr Tolerance k_tol_grad{1e-5, 1e-3};
inline constexpr Tolerance k_tol_adamw_stored{1e-6, 0};

// End-to-end AdamW: atol 1e-4 where the reference gradient |g| >= 1e-6, 2e-3
// elsewhere (at step 1 the update is ~lr*g/(|g|+eps), so rounding noise in a
// near-zero gradient decides it).
TensorDiff compare_after_adamw(const std::string& name, const Tensor& x, const Tensor& ref,
                               const Tensor& ref_grad);

// One line per failure plus the per-group maxima.
struct ParitySummary {
    double logits = 0, loss = 0, hidden = 0, grads = 0, after = 0;  // max |diff| per group
    int64_t checked = 0;
    std::vector<TensorDiff> failures;
    bool ok() const { return failures.empty(); }
};

// Compares `results` (keys as `loom forward` writes them: logits / start_logits /
// end_logits, loss, hidden_states.<i>, grad.<name>, after.<name>) with the
// fixture's expected tensors and, when given, after_adamw tensors (keyed by
// parameter name). Every expected key present in results is checked; expected
// keys missing from results are failures unless the group was not computed
// (no grad.* at all without --backward, no after.* without --adamw-step).
ParitySummary compare_with_reference(const std::map<std::string, Tensor>& results,
                                     const std::map<std::string, Tensor>& expected,
                                     const std::map<std::string, Tensor>& after_expected);

}  // namespace loom
