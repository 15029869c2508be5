// AdamW over a flat buffer, torch.optim.AdamW semantics (amsgrad off):
//   p = p * (1 - lr*wd)
//   m = b1*m + (1-b1)*g ;  v = b2*v + (1-b2)*g*g
//   p = p - (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// `step` is t, counted from 1. Works on any contiguous shard of the buffers.
#pragma once

#include <cstdint>

namespace loom {

struct AdamWParams {
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& hp, int64_t step);

}  // namespace loom
