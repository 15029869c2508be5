// Layer normalisation over the last dimension, torch semantics:
// out = (x - mean) / sqrt(var + eps) * weight + bias, biased variance.
//
// Saves mean and rstd per row for backward. dweight/dbias accumulate (+=);
// dinp overwrites unless `accumulate_dinp` (the residual stream).
#pragma once

#include <cstdint>

namespace loom {

template <typename T>
void layer_norm_forward(T* out,           // (N, C)
                        T* mean,          // (N)
                        T* rstd,          // (N)
                        const T* inp,     // (N, C)
                        const T* weight,  // (C)
                        const T* bias,    // (C)
                        int64_t N, int64_t C, double eps);

template <typename T>
void layer_norm_backward(T* dinp,          // (N, C)
                         T* dweight,       // (C), +=
                         T* dbias,         // (C), +=
                         const T* dout,    // (N, C)
                         const T* inp,     // (N, C)
                         const T* weight,  // (C)
                         const T* mean,    // (N)
                         const T* rstd,    // (N)
                         int64_t N, int64_t C, bool accumulate_dinp = false);

}  // namespace loom
