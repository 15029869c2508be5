// SingleStep (single_step.h).
#include "parallel/single_step.h"

#include <cmath>

#include "core/fault_points.h"
#include "optim/grad_clip.h"
#include "parallel/dp_step.h"

namespace loom {

double SingleStep::run(const std::vector<MicroBatch>& micro, double loss_scale) {
    double loss_sum = 0;
    for (const MicroBatch& m : micro) {
        const LossSum l = forward_micro_batch(model_, m);
        loss_sum += l.sum;
        fault_point("backward");
        if (l.count > 0) model_.backward(loss_scale);
    }
    return loss_sum;
}

bool SingleStep::defer_scaling() const {
    return model_.params().op_ctx().act != DType::f32 &&
           dynamic_cast<FlatOptimizer*>(&optimizer_) != nullptr;
}

void SingleStep::scale_grads(float s) {
    if (defer_scaling())
        pending_.scale(double(s));
    else
        loom::scale_grads(model_.params(), double(s));
}

double SingleStep::clip_grad_norm(double max_norm) {
    if (!defer_scaling()) {
        if (max_norm > 0) return loom::clip_grad_norm(model_.params(), max_norm);
        return std::sqrt(grad_norm_sq(model_.params()));
    }
    return pending_.clip(grad_norm_sq(model_.params()), max_norm);
}

void SingleStep::step(double lr) {
    if (defer_scaling())
        static_cast<FlatOptimizer&>(optimizer_).step(lr, float(pending_.factor));
    else
        optimizer_.step(lr);
    pending_.reset();
}

}  // namespace loom
