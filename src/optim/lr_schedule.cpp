// Learning-rate schedules: each branch transcribes the lr_lambda of the
// matching HF function (transformers/optimization.py), including its
// max(1, ...) guards, so a zero-length warmup or decay never divides by zero.
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/check.h"

namespace loom {

LrSchedule::LrSchedule(const LrScheduleArgs& args) : args_(args) {
    LOOM_CHECK(args.warmup_steps >= 0, "lr schedule: warmup_steps must be >= 0, got {}",
               args.warmup_steps);
    LOOM_CHECK(args.total_steps >= 0, "lr schedule: total steps must be >= 0, got {}",
               args.total_steps);
    LOOM_CHECK(std::isfinite(args.base_lr) && args.base_lr >= 0,
               "lr schedule: learning_rate must be a finite number >= 0, got {}", args.base_lr);
    if (args.type == LrSchedulerType::polynomial) {
        // HF raises the same error: the decay would go up, not down.
        LOOM_CHECK(args.base_lr > args.lr_end,
                   "lr schedule polynomial: lr_end ({}) must be smaller than the initial "
                   "learning_rate ({})",
                   args.lr_end, args.base_lr);
    }
    double default_cycles = args.type == LrSchedulerType::cosine_with_restarts ? 1.0 : 0.5;
    num_cycles_ = args.num_cycles.value_or(default_cycles);
}

double LrSchedule::factor_at(int64_t step) const {
    const int64_t w = args_.warmup_steps;
    const int64_t t = args_.total_steps;
    const auto warmup = [&] {
        return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, w));
    };
    const auto progress = [&] {
        return static_cast<double>(step - w) / static_cast<double>(std::max<int64_t>(1, t - w));
    };
    switch (args_.type) {
        case LrSchedulerType::constant:
            return 1.0;
        case LrSchedulerType::constant_with_warmup:
            return step < w ? warmup() : 1.0;
        case LrSchedulerType::linear:
            if (step < w) return warmup();
            return std::max(0.0, static_cast<double>(t - step) /
                                     static_cast<double>(std::max<int64_t>(1, t - w)));
        case LrSchedulerType::cosine: {
            if (step < w) return warmup();
            double p = progress();
            return std::max(0.0,
                            0.5 * (1.0 + std::cos(std::numbers::pi * num_cycles_ * 2.0 * p)));
        }
        case LrSchedulerType::cosine_with_restarts: {
            if (step < w) return warmup();
            double p = progress();
            if (p >= 1.0) return 0.0;
            return std::max(0.0,
                            0.5 * (1.0 + std::cos(std::numbers::pi * std::fmod(num_cycles_ * p, 1.0))));
        }
        case LrSchedulerType::polynomial: {
            if (step < w) return warmup();
            const double lr_init = args_.base_lr;
            if (step > t) return args_.lr_end / lr_init;
            double lr_range = lr_init - args_.lr_end;
            // HF divides by (t - w) unguarded; it only reaches here with
            // w <= step <= t, so t == w means step == t: keep the end value.
            double decay_steps = static_cast<double>(t - w);
            double pct_remaining =
                decay_steps > 0 ? 1.0 - static_cast<double>(step - w) / decay_steps : 0.0;
            double decay = lr_range * std::pow(pct_remaining, args_.power) + args_.lr_end;
            return decay / lr_init;
        }
    }
    LOOM_FAIL("lr schedule: unknown scheduler type {}", static_cast<int>(args_.type));
}

}  // namespace loom
