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

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"

namespace loom {

namespace {

// The update's scalars, formed once per step.
struct Coefficients {
    float decay, b1, one_minus_b1, b2, one_minus_b2, step_size, bc2_sqrt, eps;
    Coefficients(const AdamWParams& hp, int64_t step, bool decayed) {
        LOOM_CHECK(step >= 1, "adamw: step must count from 1, got {}", step);
        decay = float(1.0 - hp.lr * (decayed ? hp.weight_decay : 0.0));
        b1 = float(hp.beta1);
        one_minus_b1 = float(1.0 - hp.beta1);
        b2 = float(hp.beta2);
        one_minus_b2 = float(1.0 - hp.beta2);
        const double bc1 = 1.0 - std::pow(hp.beta1, double(step));
        const double bc2 = 1.0 - std::pow(hp.beta2, double(step));
        step_size = float(hp.lr / bc1);
        bc2_sqrt = float(std::sqrt(bc2));
        eps = float(hp.eps);
    }
};

// Elements [lo, hi) on the calling thread. Unscaled gradients keep their
// own loop: the common case pays no multiply.
template <bool Scaled>
void update_range(float* param, const float* grad, float* m, float* v, int64_t lo, int64_t hi,
                  const Coefficients& k, float grad_scale) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
        const float g = Scaled ? grad[i] * grad_scale : grad[i];
        const float p = param[i] * k.decay;
        // torch's add_(other, alpha) and addcmul_ kernels are fused multiply-adds
        // onto the already-decayed moment; addcdiv_ is self + (value * t1) / t2.
        const float mi = std::fma(g, k.one_minus_b1, m[i] * k.b1);
        const float vi = std::fma(k.one_minus_b2 * g, g, v[i] * k.b2);
        const float denom = std::sqrt(vi) / k.bc2_sqrt + k.eps;
        m[i] = mi;
        v[i] = vi;
        param[i] = p + (-k.step_size * mi) / denom;
    }
}

bool worth_threads(int64_t n) {
    return n > (1 << 15) && !omp_in_parallel();
}

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& hp, int64_t step) {
    const UpdateRun whole{0, 0, n, true};
    adamw_update_runs(param, grad, m, v, std::span(&whole, 1), hp, step);
}

void adamw_update_runs(float* param, const float* grad, float* m, float* v,
                       std::span<const UpdateRun> runs, const AdamWParams& hp, int64_t step,
                       float grad_scale) {
    const Coefficients with(hp, step, true), without(hp, step, false);
    // Where each run starts with the runs laid end to end: a chunk finds its
    // first run by search, not by walking every run before it.
    std::vector<int64_t> begin(runs.size() + 1, 0);
    for (size_t i = 0; i < runs.size(); ++i) begin[i + 1] = begin[i] + runs[i].n;
    const int64_t total = begin.back();
    // Chunks the team takes as threads come free: a thread whose core another
    // process took does fewer of them. Elementwise, so the bits do not depend
    // on who takes which. Multiples of 16 elements keep the vector loops whole.
    constexpr int64_t k_chunk = 1 << 16;
    const int64_t chunks = (total + k_chunk - 1) / k_chunk;
#pragma omp parallel for schedule(dynamic, 1) if (worth_threads(total))
    for (int64_t c = 0; c < chunks; ++c) {
        const int64_t lo = c * k_chunk, hi = std::min(total, lo + k_chunk);
        auto i = size_t(std::upper_bound(begin.begin(), begin.end(), lo) - begin.begin() - 1);
        for (; i < runs.size() && begin[i] < hi; ++i) {
            const UpdateRun& r = runs[i];
            const int64_t base = begin[i];
            const int64_t a = std::max(lo, base), b = std::min(hi, base + r.n);
            if (a >= b) continue;
            const Coefficients& k = r.decay ? with : without;
            float* const p = param + r.param_offset;
            const float* const g = grad + r.state_offset;
            if (grad_scale == 1.0f)
                update_range<false>(p, g, m + r.state_offset, v + r.state_offset, a - base,
                                    b - base, k, grad_scale);
            else
                update_range<true>(p, g, m + r.state_offset, v + r.state_offset, a - base, b - base,
                                   k, grad_scale);
        }
    }
}

}  // namespace loom
