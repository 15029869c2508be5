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

// pre = inp + bias (broadcast over rows), out = act(pre); pre is saved for backward
// (may be null when not needed). inp may alias pre.
template <typename T>
void bias_activation_forward_cuda(T* out,         // (N, OC)
                                  T* pre,         // (N, OC) or null
                                  const T* inp,   // (N, OC)
                                  const T* bias,  // (OC)
                                  int64_t N, int64_t OC, Activation a, CudaContext& ctx);

// dpre = dout * act'(pre) (overwrites, may alias dout); dbias (OC) += column sums of dpre.
template <typename T>
void bias_activation_backward_cuda(T* dpre,        // (N, OC)
                                   T* dbias,       // (OC), +=, or null
                                   const T* pre,   // (N, OC)
                                   const T* dout,  // (N, OC)
                                   int64_t N, int64_t OC, Activation a, CudaContext& ctx);

}  // namespace loom
