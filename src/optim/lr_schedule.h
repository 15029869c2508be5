// Learning-rate schedules with Hugging Face semantics (transformers
// optimization.py: get_linear_schedule_with_warmup and friends).
//
// Invariant: `factor_at(step)` is the multiplier LambdaLR applies for the
// optimizer update with 0-based index `step`; HF's Trainer calls
// `lr_scheduler.step()` after each update, so update 0 uses factor_at(0),
// which is 0 whenever warmup_steps > 0 (exactly as in HF). The learning rate
// HF logs after update k is lr_at(k + 1).
//
// The enum and its string table live here (header-only) so the job-file
// parser can validate `lr_scheduler_type` without linking the optimizer.
// Not here: warmup-step resolution from warmup_ratio lives in
// warmup_steps_for(); the optimizer applies the rate, this only computes it.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace loom {

enum class LrSchedulerType {
    linear,
    cosine,
    cosine_with_restarts,
    polynomial,
    constant,
    constant_with_warmup,
};

// HF's names for `lr_scheduler_type`, in enum order.
inline constexpr std::array<std::string_view, 6> k_lr_scheduler_names = {
    "linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup"};

inline std::string_view lr_scheduler_name(LrSchedulerType t) {
    return k_lr_scheduler_names[static_cast<size_t>(t)];
}

inline std::optional<LrSchedulerType> lr_scheduler_from_name(std::string_view name) {
    for (size_t i = 0; i < k_lr_scheduler_names.size(); ++i)
        if (k_lr_scheduler_names[i] == name) return static_cast<LrSchedulerType>(i);
    return std::nullopt;
}

struct LrScheduleArgs {
    LrSchedulerType type = LrSchedulerType::linear;
    double base_lr = 5e-5;       // the optimizer's initial learning rate
    int64_t warmup_steps = 0;    // already resolved (see warmup_steps_for)
    int64_t total_steps = 0;     // num_training_steps; unused by constant*
    // polynomial: HF defaults lr_end=1e-7, power=1.0.
    double lr_end = 1e-7;
    double power = 1.0;
    // cosine: 0.5 (half a wave, to zero); cosine_with_restarts: 1.0 by default
    // in HF. Unset means "HF's default for the chosen type".
    std::optional<double> num_cycles;
};

class LrSchedule {
public:
    // Validates the arguments (names the offending field on error).
    explicit LrSchedule(const LrScheduleArgs& args);

    // Multiplier of base_lr for the update with 0-based index `step`.
    double factor_at(int64_t step) const;
    double lr_at(int64_t step) const { return args_.base_lr * factor_at(step); }
    const LrScheduleArgs& args() const { return args_; }

private:
    LrScheduleArgs args_;
    double num_cycles_;
};

// HF TrainingArguments.get_warmup_steps: warmup_steps when > 0, otherwise
// ceil(total_steps * warmup_ratio). Inline: the job planner uses it without
// linking the optimizer.
inline int64_t warmup_steps_for(int64_t total_steps, int64_t warmup_steps, double warmup_ratio) {
    if (warmup_steps > 0) return warmup_steps;
    return static_cast<int64_t>(std::ceil(static_cast<double>(total_steps) * warmup_ratio));
}

}  // namespace loom
