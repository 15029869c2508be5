// PendingScale: the one factor an optimizer update multiplies the gradients
// by as it reads them, when unscaling (fp16's loss scale) and clipping are
// not applied in place: narrow gradients (a GPU's bf16 or fp16) would lose
// small values to an in-place multiply. The step engines that defer keep one
// (SingleStep and DataParallel for narrow gradients).
#pragma once

#include <cmath>

#include "optim/grad_clip.h"

namespace loom {

struct PendingScale {
    double factor = 1.0;

    void reset() { factor = 1.0; }
    void scale(double s) { factor *= s; }
    // The norm of the gradients as the update will see them, from the
    // buffers' raw sum of squares; with max_norm > 0 and a finite norm, the
    // clipping coefficient joins the factor (torch clip_grad_norm_).
    double clip(double raw_sq, double max_norm) {
        const double norm = std::sqrt(raw_sq) * factor;
        if (max_norm > 0 && std::isfinite(norm)) factor *= clip_coefficient(norm, max_norm);
        return norm;
    }
};

}  // namespace loom
