// SGD's update over runs of the flat buffers (torch.optim.SGD, momentum 0,
// coupled weight decay; optim/sgd.h): p = p - lr * (g * grad_scale + wd * p),
// wd only on decaying runs. Stateless and elementwise, so a ZeRO shard
// updates alone. The CUDA kernel (ops/cuda/sgd_cuda.cu) rounds the same way.
#pragma once

#include <cstdint>
#include <span>

#include "ops/adamw.h"

namespace loom {

void sgd_update_runs(float* param, const float* grad, std::span<const UpdateRun> runs, double lr,
                     double weight_decay, float grad_scale = 1.0f);

}  // namespace loom
