// CUDA softmax cross-entropy with ignore_index -100 (semantics of ops/softmax_xent.h).
//
// Forward returns the sum of per-row losses and the count of labelled rows; the
// caller normalises. The sum is reduced in a fixed order in fp64, so it is
// bit-identical run to run. A target outside [0, V) other than -100 is an
// error: the row is treated as ignored and the forward throws after its sync.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "ops/softmax_xent.h"

namespace loom {

// Synchronises the stream to return the sum (and to report bad targets).
template <typename T>
XentSum softmax_xent_forward_cuda(T* losses,        // (N) per-row loss, 0 on ignored; or null
                                  const T* logits,  // (N, V)
                                  const int64_t* targets,  // (N)
                                  int64_t N, int64_t V, CudaContext& ctx);

// dlogits = scale * (softmax(logits) - onehot(target)); 0 on ignored rows. Overwrites;
// dlogits may alias logits (llm.c's fused classifier writes the gradient in place).
template <typename T>
void softmax_xent_backward_cuda(T* dlogits, const T* logits, const int64_t* targets, int64_t N,
                                int64_t V, double scale, CudaContext& ctx);

}  // namespace loom
