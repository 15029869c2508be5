// CUDA layer norm, fused forward and backward (torch semantics, as ops/layer_norm.h).
//
// Same argument order as the CPU header, then the CudaContext. Differences, on
// purpose: mean and rstd are always fp32 (bf16 statistics would cost accuracy
// for no memory worth saving), and `eps` is applied in fp32. dweight and dbias
// accumulate (+=) through a deterministic column reduction; dinp overwrites
// unless `accumulate_dinp` (the residual stream).
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_context.h"

namespace loom {

template <typename T>
void layer_norm_forward_cuda(T* out,           // (N, C)
                             float* mean,      // (N)
                             float* rstd,      // (N)
                             const T* inp,     // (N, C)
                             const T* weight,  // (C)
                             const T* bias,    // (C) or null
                             int64_t N, int64_t C, double eps, CudaContext& ctx);

template <typename T>
void layer_norm_backward_cuda(T* dinp,            // (N, C)
                              T* dweight,         // (C), +=
                              T* dbias,           // (C), +=, or null
                              const T* dout,      // (N, C)
                              const T* inp,       // (N, C)
                              const T* weight,    // (C)
                              const float* mean,  // (N)
                              const float* rstd,  // (N)
                              int64_t N, int64_t C, bool accumulate_dinp, CudaContext& ctx);

}  // namespace loom
