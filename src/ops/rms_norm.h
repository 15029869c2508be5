// RMS normalisation over the last dimension (T5/Llama's RMSNorm, as
// transformers 4.40 computes it in float32):
//   out = weight * (x * rsqrt(mean(x^2) + eps))
// No mean subtraction and no bias. Saves rstd per row for backward.
// dweight accumulates (+=); dinp overwrites unless `accumulate_dinp` (the
// residual stream), as in ops/layer_norm.h. Results do not depend on the
// thread count.
#pragma once

#include <cstdint>

namespace loom {

void rms_norm_forward(float* out,           // (N, C)
                      float* rstd,          // (N)
                      const float* inp,     // (N, C)
                      const float* weight,  // (C)
                      int64_t N, int64_t C, double eps);

void rms_norm_backward(float* dinp,          // (N, C)
                       float* dweight,       // (C), +=; null: not wanted
                       const float* dout,    // (N, C)
                       const float* inp,     // (N, C)
                       const float* weight,  // (C)
                       const float* rstd,    // (N)
                       int64_t N, int64_t C, bool accumulate_dinp = false);

}  // namespace loom
