// How many optimizer steps a job runs, and when it logs, evaluates and saves:
// HF Trainer's arithmetic (_inner_training_loop and TrainingArguments),
// kept apart from the trainer so it can be tested on its own.
//
//   batches per replica  = ceil(ceil(N / dp) / per_device_batch)   (floor with drop_last)
//   updates per epoch    = max(batches // gradient_accumulation_steps, 1)
//   total steps          = max_steps if > 0, else ceil(num_train_epochs * updates per epoch)
//   epochs               = ceil(total / updates per epoch) when max_steps > 0
//
// NOTE: as in HF, the final partial accumulation of an epoch still makes an
// update in the loop, but the totals above (which drive the LR schedule)
// use the floor; keep both the same as HF rather than "fixing" one.
// A logging/eval/save interval below 1 is a fraction of the total steps.
#pragma once

#include <cstdint>

#include "config/job.h"

namespace loom {

struct StepPlan {
    int64_t examples_per_replica = 0;  // ceil(N / dp): the distributed sampler pads
    int64_t batches_per_epoch = 0;     // per replica
    int64_t updates_per_epoch = 0;
    int64_t total_steps = 0;
    int64_t epochs = 0;          // whole epochs the loop starts
    int64_t warmup_steps = 0;    // resolved from warmup_steps / warmup_ratio
    int64_t logging_steps = 0;   // 0 when the strategy is not "steps"
    int64_t eval_steps = 0;
    int64_t save_steps = 0;
    int64_t global_batch_size = 0;  // per_device x accumulation x dp
};

// num_train_examples: records in the training set; data_parallel_size: number
// of replicas that split it.
StepPlan plan_steps(const TrainingArgs& training, const CheckpointArgs& checkpoint,
                    int64_t num_train_examples, int64_t data_parallel_size);

// HF: an interval < 1 is ceil(total * interval); otherwise the interval.
int64_t resolve_interval(double interval, int64_t total_steps);

}  // namespace loom
