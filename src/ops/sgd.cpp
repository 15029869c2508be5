// SGD on the CPU. Built with -ffp-contract=off (cmake/components.cmake), as
// the CUDA kernel rounds every operation on its own.
#include "ops/sgd.h"

namespace loom {

void sgd_update_runs(float* param, const float* grad, std::span<const UpdateRun> runs, double lr,
                     double weight_decay, float grad_scale) {
    const float lrf = float(lr);
    for (const UpdateRun& r : runs) {
        const float wd = r.decay ? float(weight_decay) : 0.0f;
        float* p = param + r.param_offset;
        const float* g = grad + r.state_offset;
#pragma omp parallel for schedule(static) if (r.n > (1 << 16))
        for (int64_t i = 0; i < r.n; ++i) p[i] -= lrf * (g[i] * grad_scale + wd * p[i]);
    }
}

}  // namespace loom
