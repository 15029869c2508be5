// Global gradient-norm clipping, torch.nn.utils.clip_grad_norm_ semantics:
//   total = sqrt(sum g^2) over every trainable parameter (tied ones once);
//   if max_norm / (total + 1e-6) < 1, every gradient is scaled by that factor.
//
// The sum of squares is split out so data/tensor parallel callers can reduce
// it across ranks before clip_scale(); the reduction here is in double with a
// fixed chunking, so the result does not depend on the thread count.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "nn/param_table.h"

namespace loom {

// Sum of squared gradients over trainable rows, on the table's backend;
// `exclude`: flat ranges whose rows are left out (a row starting inside one).
double grad_norm_sq(const ParamTable& table,
                    const std::vector<std::pair<int64_t, int64_t>>& exclude = {});
// The factor clip_grad_norm would apply (1 when no clipping is needed).
double clip_coefficient(double total_norm, double max_norm);
// Multiplies every trainable gradient by s.
void scale_grads(ParamTable& table, double s);
// Clips in place; returns the norm before clipping.
double clip_grad_norm(ParamTable& table, double max_norm);

}  // namespace loom
