// AdamW over a flat buffer, torch.optim.AdamW semantics (amsgrad off):
//   p = p * (1 - lr*wd)
//   m = b1*m + (1-b1)*g ;  v = b2*v + (1-b2)*g*g
//   p = p - (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// `step` is t, counted from 1. Works on any contiguous shard of the buffers.
#pragma once

#include <cstdint>
#include <span>

namespace loom {

struct AdamWParams {
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& hp, int64_t step);

// A run of the flat buffers an elementwise optimizer update (AdamW, SGD)
// covers: n elements at param + param_offset and at grad, m, v +
// state_offset, with the weight decay or none.
struct UpdateRun {
    int64_t param_offset = 0, state_offset = 0, n = 0;
    bool decay = true;
};
// adamw_update over every run, in one parallel region over fixed chunks of elements.
// BERT alternates decayed and undecayed rows (~100 runs); a region per run cost
// tens of microseconds of thread wake-up each under a passive OpenMP wait policy.
// grad_scale multiplies each gradient in fp32 first (clipping, removing a
// loss scale) without a pass of its own over the gradients.
void adamw_update_runs(float* param, const float* grad, float* m, float* v,
                       std::span<const UpdateRun> runs, const AdamWParams& hp, int64_t step,
                       float grad_scale = 1.0f);

}  // namespace loom
