// Dynamic loss scaling for fp16 training, with torch.cuda.amp.GradScaler's
// rule and defaults (what the HF Trainer uses with fp16: true):
//   backward runs on loss x scale, so small gradients survive fp16;
//   the gradients are unscaled (x 1/scale) before clipping and the update;
//   a step whose gradients hold an inf or NaN is skipped and the scale is
//   multiplied by backoff_factor; after growth_interval finite steps in a
//   row it is multiplied by growth_factor.
// Scales are powers of two with the defaults, so scaling and unscaling are
// exact in fp32.
#pragma once

#include <cstdint>

namespace loom {

struct LossScaleOptions {
    double init_scale = 65536.0;  // 2^16
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int64_t growth_interval = 2000;
};

class DynamicLossScale {
  public:
    explicit DynamicLossScale(const LossScaleOptions& o = {});

    double scale() const { return scale_; }
    // Call once per optimizer step with whether every gradient was finite;
    // returns true when the optimizer should apply the step.
    bool update(bool grads_finite);
    int64_t growth_tracker() const { return tracker_; }  // finite steps since the last change
    int64_t skipped() const { return skipped_; }         // steps skipped so far

    // Checkpoint state (the trainer stores it in trainer_state.json).
    void restore(double scale, int64_t growth_tracker, int64_t skipped);

  private:
    LossScaleOptions o_;
    double scale_;
    int64_t tracker_ = 0;
    int64_t skipped_ = 0;
};

}  // namespace loom
