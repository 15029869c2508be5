// CUDA AdamW over flat buffers (torch.optim.AdamW semantics, as ops/adamw.h).
//
// The bias corrections are computed once on the host in fp64; the kernel works
// in fp32 on fp32 master weights and moments. The mixed-precision form reads a
// bf16/f16 gradient and refreshes the bf16/f16 parameter copy the forward uses,
// in the same pass (llm.c's adamw_kernel3 with master weights). Works on any
// contiguous shard, so ZeRO calls it on its slice.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "ops/adamw.h"

namespace loom {

// grad_scale multiplies each gradient in fp32 before the update (clipping,
// removing a loss scale) without a pass over the gradient buffer.
void adamw_update_cuda(float* param, const float* grad, float* m, float* v, int64_t n,
                       const AdamWParams& hp, int64_t step, CudaContext& ctx,
                       float grad_scale = 1.0f);

// master (n) fp32 is updated; param_copy (n) = round(master) in T (may be null).
// T is __nv_bfloat16 or __half; G (the gradient type) is T or float.
template <typename G, typename T>
void adamw_update_mixed_cuda(float* master, const G* grad, float* m, float* v, T* param_copy,
                             int64_t n, const AdamWParams& hp, int64_t step, CudaContext& ctx,
                             float grad_scale = 1.0f);

}  // namespace loom
