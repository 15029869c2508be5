// DynamicLossScale: GradScaler's update rule.
#include "optim/loss_scale.h"

#include "core/check.h"

namespace loom {

DynamicLossScale::DynamicLossScale(const LossScaleOptions& o) : o_(o), scale_(o.init_scale) {
    LOOM_CHECK(o.init_scale > 0 && o.growth_factor > 1 && o.backoff_factor > 0 &&
                   o.backoff_factor < 1 && o.growth_interval > 0,
               "loss scale: need init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and "
               "growth_interval > 0");
}

bool DynamicLossScale::update(bool grads_finite) {
    if (!grads_finite) {
        scale_ *= o_.backoff_factor;
        tracker_ = 0;
        ++skipped_;
        return false;
    }
    if (++tracker_ == o_.growth_interval) {
        scale_ *= o_.growth_factor;
        tracker_ = 0;
    }
    return true;
}

void DynamicLossScale::restore(double scale, int64_t growth_tracker, int64_t skipped) {
    LOOM_CHECK(scale > 0 && growth_tracker >= 0 && skipped >= 0,
               "loss scale: bad checkpoint state (scale {}, growth tracker {}, skipped {})", scale,
               growth_tracker, skipped);
    scale_ = scale;
    tracker_ = growth_tracker;
    skipped_ = skipped;
}

}  // namespace loom
