// AdamW step over a flat fp32 shard, torch.optim.AdamW (single-tensor, amsgrad
// off) arithmetic in torch's order:
//   p.mul_(1 - lr*wd); m.mul_(b1).add_(g, alpha=1-b1); v.mul_(b2).addcmul_(g, g, value=1-b2)
//   denom = v.sqrt() / sqrt(1 - b2^t) + eps;  p.addcdiv_(m, denom, value=-lr/(1 - b1^t))
// Scalars are formed in double (Python floats) and rounded to float once, as
// torch does when it applies a Python scalar to a float tensor. The rounding
// sequence matches torch 1.13's CPU kernels bit for bit (checked on 3 steps of
// 100k elements); no product below can be contracted into another FMA.
#include "ops/adamw.h"

#include <omp.h>

#include <cmath>

#include "core/check.h"

namespace loom {

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& hp, int64_t step) {
    LOOM_CHECK(step >= 1, "adamw: step must count from 1, got {}", step);
    const float decay = float(1.0 - hp.lr * hp.weight_decay);
    const float b1 = float(hp.beta1), one_minus_b1 = float(1.0 - hp.beta1);
    const float b2 = float(hp.beta2), one_minus_b2 = float(1.0 - hp.beta2);
    const double bc1 = 1.0 - std::pow(hp.beta1, double(step));
    const double bc2 = 1.0 - std::pow(hp.beta2, double(step));
    const float step_size = float(hp.lr / bc1);
    const float bc2_sqrt = float(std::sqrt(bc2));
    const float eps = float(hp.eps);
#pragma omp parallel for simd schedule(static) if (parallel: n > (1 << 15) && !omp_in_parallel())
    for (int64_t i = 0; i < n; ++i) {
        const float g = grad[i];
        const float p = param[i] * decay;
        // torch's add_(other, alpha) and addcmul_ kernels are fused multiply-adds
        // onto the already-decayed moment; addcdiv_ is self + (value * t1) / t2.
        const float mi = std::fma(g, one_minus_b1, m[i] * b1);
        const float vi = std::fma(one_minus_b2 * g, g, v[i] * b2);
        const float denom = std::sqrt(vi) / bc2_sqrt + eps;
        m[i] = mi;
        v[i] = vi;
        param[i] = p + (-step_size * mi) / denom;
    }
}

}  // namespace loom
