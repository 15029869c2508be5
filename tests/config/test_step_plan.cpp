// HF Trainer's step arithmetic, on hand-worked cases.
#include <gtest/gtest.h>

#include "config/step_plan.h"
#include "core/check.h"

namespace loom {
namespace {

TEST(StepPlan, EpochsToSteps) {
    TrainingArgs t;  // 3 epochs, batch 8, no accumulation
    CheckpointArgs c;
    // 100 examples on 1 replica: ceil(100/8) = 13 batches = 13 updates/epoch;
    // 3 epochs -> 39 steps.
    StepPlan p = plan_steps(t, c, 100, 1);
    EXPECT_EQ(p.batches_per_epoch, 13);
    EXPECT_EQ(p.updates_per_epoch, 13);
    EXPECT_EQ(p.total_steps, 39);
    EXPECT_EQ(p.epochs, 3);
    EXPECT_EQ(p.logging_steps, 500);
    EXPECT_EQ(p.save_steps, 500);
    EXPECT_EQ(p.eval_steps, 0);  // eval_strategy "no"
    EXPECT_EQ(p.global_batch_size, 8);
}

TEST(StepPlan, AccumulationReplicasAndFractionalEpochs) {
    TrainingArgs t;
    CheckpointArgs c;
    t.gradient_accumulation_steps = 4;
    t.num_train_epochs = 2.5;
    // 1001 examples over 2 replicas: the sampler pads to 501 each; ceil(501/8)
    // = 63 batches; 63 // 4 = 15 updates per epoch (HF floors); 2.5 epochs ->
    // ceil(37.5) = 38 steps; the loop starts ceil(2.5) = 3 epochs.
    StepPlan p = plan_steps(t, c, 1001, 2);
    EXPECT_EQ(p.examples_per_replica, 501);
    EXPECT_EQ(p.batches_per_epoch, 63);
    EXPECT_EQ(p.updates_per_epoch, 15);
    EXPECT_EQ(p.total_steps, 38);
    EXPECT_EQ(p.epochs, 3);
    EXPECT_EQ(p.global_batch_size, 8 * 4 * 2);
    // drop_last: floor(501/8) = 62 batches -> 15 updates.
    t.dataloader_drop_last = true;
    EXPECT_EQ(plan_steps(t, c, 1001, 2).batches_per_epoch, 62);
}

TEST(StepPlan, MaxStepsWinsAndRatiosResolve) {
    TrainingArgs t;
    CheckpointArgs c;
    t.max_steps = 30;
    t.warmup_ratio = 0.1;
    t.logging_steps = 0.05;  // ceil(30 * 0.05) = 2
    t.eval_strategy = IntervalStrategy::steps;
    t.eval_steps = 0.25;     // ceil(7.5) = 8
    c.save_steps = 10;
    // 20 examples, batch 8 -> 3 batches -> 3 updates/epoch; 30 steps = 10 epochs.
    StepPlan p = plan_steps(t, c, 20, 1);
    EXPECT_EQ(p.total_steps, 30);
    EXPECT_EQ(p.epochs, 10);
    EXPECT_EQ(p.warmup_steps, 3);  // ceil(30 * 0.1)
    EXPECT_EQ(p.logging_steps, 2);
    EXPECT_EQ(p.eval_steps, 8);
    EXPECT_EQ(p.save_steps, 10);
    t.max_steps = 31;  // 31 / 3 = 10 rem 1 -> 11 epochs
    EXPECT_EQ(plan_steps(t, c, 20, 1).epochs, 11);
    t.warmup_steps = 5;  // explicit warmup_steps beat the ratio
    EXPECT_EQ(plan_steps(t, c, 20, 1).warmup_steps, 5);
}

TEST(StepPlan, TinyDataStillMakesOneUpdatePerEpoch) {
    TrainingArgs t;
    CheckpointArgs c;
    t.gradient_accumulation_steps = 16;
    t.num_train_epochs = 1;
    // 1 batch // 16 = 0, clamped to 1 as HF does.
    EXPECT_EQ(plan_steps(t, c, 5, 1).total_steps, 1);
    EXPECT_THROW(plan_steps(t, c, 0, 1), loom::Error);
    t.dataloader_drop_last = true;
    EXPECT_THROW(plan_steps(t, c, 5, 1), loom::Error);
}

}  // namespace
}  // namespace loom
