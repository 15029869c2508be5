// CUDA dropout keyed by global element (semantics of ops/dropout.h).
//
// The kernel calls the very PhiloxStream::uniform the CPU uses (core/philox.h is
// host/device), so for the same DropoutSpec the GPU keeps exactly the CPU's
// elements: a mask never depends on the device, the thread or the rank.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "ops/dropout.h"

namespace loom {

// out may alias inp.
template <typename T>
void dropout_forward_cuda(T* out, const T* inp, int64_t B, int64_t per_sample, const DropoutSpec& d,
                          CudaContext& ctx);

// dinp may alias dout.
template <typename T>
void dropout_backward_cuda(T* dinp, const T* dout, int64_t B, int64_t per_sample,
                           const DropoutSpec& d, CudaContext& ctx);

}  // namespace loom
