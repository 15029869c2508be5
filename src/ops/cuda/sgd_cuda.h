// CUDA SGD over a flat run (optim/sgd.h: torch.optim.SGD, momentum 0, coupled
// weight decay): p = p - lr * (g * grad_scale + wd * p), in fp32 on the master
// weights with the CPU's rounding sequence, the bf16/f16 copy refreshed in the
// same pass. Stateless and elementwise, so a ZeRO shard updates alone.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_context.h"

namespace loom {

// master (n) updated; grad (n) is G (float or the compute type); copy (n) in
// T or null.
template <typename G, typename T>
void sgd_update_cuda(float* master, const G* grad, T* copy, int64_t n, double lr,
                     double weight_decay, CudaContext& ctx, float grad_scale = 1.0f);

}  // namespace loom
