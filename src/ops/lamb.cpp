// LAMB on the CPU over tiles (see lamb.h). Built with -ffp-contract=off
// (cmake/components.cmake): the CUDA kernels round every operation on its
// own, and so must this reference, whatever the build machine's FMA.
#include "ops/lamb.h"

#include <cmath>

#include "core/check.h"

namespace loom {

namespace {

float lamb_u(float m, float v, float p, float wd, const LambStep& s) {
    return (m * s.inv_bc1) / (std::sqrt(v) * s.inv_sqrt_bc2 + s.eps) + wd * p;
}

}  // namespace

LambStep lamb_step_constants(double beta1, double beta2, double eps, double weight_decay,
                             bool bias_correction, int64_t step) {
    LOOM_CHECK(step >= 1, "lamb: step counts from 1, got {}", step);
    const double bc1 = bias_correction ? 1.0 - std::pow(beta1, double(step)) : 1.0;
    const double bc2 = bias_correction ? 1.0 - std::pow(beta2, double(step)) : 1.0;
    LambStep s;
    s.beta1 = float(beta1);
    s.one_minus_beta1 = float(1.0 - beta1);
    s.beta2 = float(beta2);
    s.one_minus_beta2 = float(1.0 - beta2);
    s.inv_bc1 = float(1.0 / bc1);
    s.inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
    s.eps = float(eps);
    s.weight_decay = float(weight_decay);
    return s;
}

void lamb_moments(const float* master, const float* grad, float* m, float* v, const LambTile* tiles,
                  int64_t n_tiles, const int64_t* row_begin, int32_t rows, double* tile_sums,
                  double* row_sums, const LambStep& s, float grad_scale) {
    // One tile per iteration; a tile's sums are sequential, so the row sums
    // do not depend on the thread count.
#pragma omp parallel for schedule(dynamic, 1) if (n_tiles > 8)
    for (int64_t k = 0; k < n_tiles; ++k) {
        const LambTile& t = tiles[k];
        const float wd = t.adapt ? s.weight_decay : 0.0f;
        const float* p = master + t.param;
        const float* g = grad + t.state;
        float* mt = m + t.state;
        float* vt = v + t.state;
        double p_sq = 0, u_sq = 0;
        for (int32_t i = 0; i < t.n; ++i) {
            const float gi = g[i] * grad_scale;
            const float mi = s.beta1 * mt[i] + s.one_minus_beta1 * gi;
            const float vi = s.beta2 * vt[i] + s.one_minus_beta2 * gi * gi;
            mt[i] = mi;
            vt[i] = vi;
            const double u = lamb_u(mi, vi, p[i], wd, s);
            p_sq += double(p[i]) * double(p[i]);
            u_sq += u * u;
        }
        tile_sums[2 * k] = p_sq;
        tile_sums[2 * k + 1] = u_sq;
    }
    for (int32_t r = 0; r < rows; ++r) {
        double p = 0, u = 0;
        for (int64_t k = row_begin[r]; k < row_begin[r + 1]; ++k) {
            p += tile_sums[2 * k];
            u += tile_sums[2 * k + 1];
        }
        row_sums[2 * r] = p;
        row_sums[2 * r + 1] = u;
    }
}

void lamb_apply(float* master, const float* m, const float* v, const LambTile* tiles,
                int64_t n_tiles, const double* row_sums, const LambStep& s, double lr) {
#pragma omp parallel for schedule(dynamic, 1) if (n_tiles > 8)
    for (int64_t k = 0; k < n_tiles; ++k) {
        const LambTile& t = tiles[k];
        const float wd = t.adapt ? s.weight_decay : 0.0f;
        const double pn = std::sqrt(row_sums[2 * int64_t(t.row)]);
        const double un = std::sqrt(row_sums[2 * int64_t(t.row) + 1]);
        const double ratio = t.adapt && pn > 0 && un > 0 ? pn / un : 1.0;
        const float scale = float(lr * ratio);
        float* p = master + t.param;
        const float* mt = m + t.state;
        const float* vt = v + t.state;
        for (int32_t i = 0; i < t.n; ++i) p[i] -= scale * lamb_u(mt[i], vt[i], p[i], wd, s);
    }
}

}  // namespace loom
