// acc (fp32) += x (float, bf16 or f16): ZeRO's reduced gradient shard summed
// over micro-batches in fp32 whatever the type the reduction travelled in
// (parallel/cuda/gpu_zero_sync.cpp). One rounding per element, as the CPU's
// GradSync adds its per-micro-batch receive buffer into the shard.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_context.h"

namespace loom {

template <typename T>
void accumulate_f32_cuda(float* acc, const T* x, int64_t n, CudaContext& ctx);

}  // namespace loom
