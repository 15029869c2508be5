// LAMB's update over tiles of the flat buffers (optim/flat_optimizer.h runs
// it; the formula is in optim/lamb.h; tiles come from ops/lamb_tiles.h). The
// CPU kernels here and the CUDA ones (ops/cuda/lamb_cuda.cu) share the
// contract, the per-step constants and the rounding of every operation:
//   lamb_moments   per tile: m, v updated in place, the tile's sums of p^2
//                  and u^2 in fp64 (u = mh / (sqrt(vh) + eps) + wd*p); then
//                  per row the sum of its tiles' partials, in tile order,
//                  into row_sums (rows, 2)
//   (ZeRO: the caller all-reduces row_sums over dp between the two passes)
//   lamb_apply     per tile: r = ||p|| / ||u|| of its row (1 when either is
//                  0 or the row does not adapt), p -= float(lr * r) * u, with
//                  u recomputed from the new moments and the old p.
// Gradients are read times grad_scale in fp32. Gradient and moments are
// indexed by LambTile::state, the weights by LambTile::param.
#pragma once

#include <cstdint>

#include "ops/lamb_tiles.h"

namespace loom {

// Per-step constants, formed in fp64 and rounded to float once.
struct LambStep {
    float beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0;
    float inv_bc1 = 1, inv_sqrt_bc2 = 1;  // 1 / (1 - b1^t), 1 / sqrt(1 - b2^t) (or 1, 1)
    float eps = 0, weight_decay = 0;      // weight decay of adapting rows
};
LambStep lamb_step_constants(double beta1, double beta2, double eps, double weight_decay,
                             bool bias_correction, int64_t step);

// tile_sums (n_tiles, 2) is scratch; row_sums (rows, 2) receives sum p^2 and
// sum u^2 per row (0 for rows without tiles).
void lamb_moments(const float* master, const float* grad, float* m, float* v, const LambTile* tiles,
                  int64_t n_tiles, const int64_t* row_begin, int32_t rows, double* tile_sums,
                  double* row_sums, const LambStep& s, float grad_scale = 1.0f);
void lamb_apply(float* master, const float* m, const float* v, const LambTile* tiles,
                int64_t n_tiles, const double* row_sums, const LambStep& s, double lr);

}  // namespace loom
