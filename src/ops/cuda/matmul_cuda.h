// CUDA linear layer: out = inp @ W^T + bias (nn.Linear) or inp @ W + bias (Conv1D).
//
// Same arguments as ops/matmul.h, then the CudaContext. dweight and dbias
// accumulate (+=): dweight through the GEMM's beta = 1, dbias through a
// deterministic column reduction. dinp overwrites unless `accumulate_dinp`.
// The bias add rides on cuBLASLt's epilogue when it can.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "ops/activation.h"
#include "ops/matmul.h"

namespace loom {

template <typename T>
void matmul_forward_cuda(T* out,           // (N, OC)
                         const T* inp,     // (N, C)
                         const T* weight,  // (OC, C) or (C, OC)
                         const T* bias,    // (OC) or null
                         int64_t N, int64_t C, int64_t OC, WeightLayout layout, CudaContext& ctx);

template <typename T>
void matmul_backward_cuda(T* dinp,          // (N, C) or null
                          T* dweight,       // like weight, +=, or null (frozen weight)
                          T* dbias,         // (OC) or null, +=
                          const T* dout,    // (N, OC)
                          const T* inp,     // (N, C)
                          const T* weight,  // (OC, C) or (C, OC)
                          int64_t N, int64_t C, int64_t OC, WeightLayout layout,
                          bool accumulate_dinp, CudaContext& ctx);

}  // namespace loom
