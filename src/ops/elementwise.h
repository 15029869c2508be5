// Small element-wise kernels: the residual add and the helpers around it.
#pragma once

#include <cstdint>

namespace loom {

// out = a + b (out may alias a or b). Residual backward is dout flowing to both
// inputs, so there is no residual_backward: callers use add_inplace.
template <typename T>
void residual_forward(T* out, const T* a, const T* b, int64_t n);

// y += x
template <typename T>
void add_inplace(T* y, const T* x, int64_t n);

// y *= s
template <typename T>
void scale_inplace(T* y, T s, int64_t n);

}  // namespace loom
