// CUDA activations: gelu (erf), gelu_new (tanh), relu, tanh; plus the fused
// bias + activation forms used around the MLP's first linear.
//
// Same arguments as ops/activation.h, then the CudaContext. dinp overwrites and
// may alias dout. bias gradients accumulate (+=) through a deterministic column
// reduction (no atomics).
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "ops/activation.h"

namespace loom {

template <typename T>
void activation_forward_cuda(T* out, const T* inp, int64_t n, Activation a, CudaContext& ctx);

template <typename T>
void activation_backward_cuda(T* dinp, const T* inp, const T* dout, int64_t n, Activation a,
                              CudaContext& ctx);

}  // namespace loom
