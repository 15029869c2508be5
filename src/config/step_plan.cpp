// HF Trainer's step arithmetic (see step_plan.h for the formulas).
#include "config/step_plan.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace loom {

int64_t resolve_interval(double interval, int64_t total_steps) {
    if (interval < 1) return static_cast<int64_t>(std::ceil(static_cast<double>(total_steps) * interval));
    return static_cast<int64_t>(interval);
}

StepPlan plan_steps(const TrainingArgs& t, const CheckpointArgs& c, int64_t num_train_examples,
                    int64_t data_parallel_size) {
    LOOM_CHECK(num_train_examples > 0, "the training set is empty: nothing to train on");
    LOOM_CHECK(data_parallel_size >= 1, "data-parallel size must be >= 1, got {}",
               data_parallel_size);
    StepPlan p;
    const int64_t bs = t.per_device_train_batch_size;
    p.examples_per_replica = (num_train_examples + data_parallel_size - 1) / data_parallel_size;
    p.batches_per_epoch = t.dataloader_drop_last ? p.examples_per_replica / bs
                                                 : (p.examples_per_replica + bs - 1) / bs;
    LOOM_CHECK(p.batches_per_epoch > 0,
               "with dataloader_drop_last, {} examples per replica make no full batch of {}",
               p.examples_per_replica, bs);
    p.updates_per_epoch = std::max<int64_t>(p.batches_per_epoch / t.gradient_accumulation_steps, 1);
    if (t.max_steps > 0) {
        p.total_steps = t.max_steps;
        p.epochs = t.max_steps / p.updates_per_epoch + (t.max_steps % p.updates_per_epoch > 0);
    } else {
        p.total_steps = static_cast<int64_t>(
            std::ceil(t.num_train_epochs * static_cast<double>(p.updates_per_epoch)));
        p.epochs = static_cast<int64_t>(std::ceil(t.num_train_epochs));
    }
    p.warmup_steps = warmup_steps_for(p.total_steps, t.warmup_steps, t.warmup_ratio);
    if (t.logging_strategy == IntervalStrategy::steps)
        p.logging_steps = resolve_interval(t.logging_steps, p.total_steps);
    if (t.eval_strategy == IntervalStrategy::steps)
        p.eval_steps = resolve_interval(t.eval_steps, p.total_steps);
    if (c.save_strategy == IntervalStrategy::steps)
        p.save_steps = resolve_interval(c.save_steps, p.total_steps);
    p.global_batch_size = bs * t.gradient_accumulation_steps * data_parallel_size;
    return p;
}

}  // namespace loom
