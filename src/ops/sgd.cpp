// SGD on the CPU. Built with -ffp-contract=off (cmake/components.cmake), as
// the CUDA kernel rounds every operation on its own.
#include "ops/sgd.h"

namespace loom {

namespace {

// Unscaled gradients keep their own loop: the common case pays no multiply.
template <bool Scaled>
void sgd_run(float* p, const float* g, int64_t n, float lr, float wd, float grad_scale) {
#pragma omp parallel for schedule(dynamic, 8192) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) {
        const float gi = Scaled ? g[i] * grad_scale : g[i];
        p[i] -= lr * (gi + wd * p[i]);
    }
}

}  // namespace

void sgd_update_runs(float* param, const float* grad, std::span<const UpdateRun> runs, double lr,
                     double weight_decay, float grad_scale) {
    const float lrf = float(lr);
    for (const UpdateRun& r : runs) {
        const float wd = r.decay ? float(weight_decay) : 0.0f;
        float* p = param + r.param_offset;
        const float* g = grad + r.state_offset;
        if (grad_scale == 1.0f)
            sgd_run<false>(p, g, r.n, lrf, wd, grad_scale);
        else
            sgd_run<true>(p, g, r.n, lrf, wd, grad_scale);
    }
}

}  // namespace loom
