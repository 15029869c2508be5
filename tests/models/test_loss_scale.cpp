// DynamicLossScale follows torch.cuda.amp.GradScaler's update rule: halve and
// reset on an inf/NaN step, double after growth_interval finite steps.
#include <gtest/gtest.h>

#include "core/check.h"
#include "optim/loss_scale.h"

namespace loom {
namespace {

TEST(LossScale, GradScalerDefaults) {
    DynamicLossScale s;
    EXPECT_EQ(s.scale(), 65536.0);
    for (int i = 0; i < 1999; ++i) EXPECT_TRUE(s.update(true));
    EXPECT_EQ(s.scale(), 65536.0);
    EXPECT_TRUE(s.update(true));  // the 2000th finite step
    EXPECT_EQ(s.scale(), 131072.0);
    EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(LossScale, BacksOffOnOverflowAndResetsTheGrowthCount) {
    LossScaleOptions o;
    o.init_scale = 1024;
    o.growth_interval = 3;
    DynamicLossScale s(o);
    EXPECT_TRUE(s.update(true));
    EXPECT_TRUE(s.update(true));
    EXPECT_FALSE(s.update(false));
    EXPECT_EQ(s.scale(), 512.0);
    EXPECT_EQ(s.growth_tracker(), 0);
    EXPECT_EQ(s.skipped(), 1);
    EXPECT_TRUE(s.update(true));
    EXPECT_TRUE(s.update(true));
    EXPECT_EQ(s.scale(), 512.0);  // two since the overflow, not four
    EXPECT_TRUE(s.update(true));
    EXPECT_EQ(s.scale(), 1024.0);
    EXPECT_FALSE(s.update(false));
    EXPECT_FALSE(s.update(false));
    EXPECT_EQ(s.scale(), 256.0);
    EXPECT_EQ(s.skipped(), 3);

    DynamicLossScale r(o);
    r.restore(s.scale(), s.growth_tracker(), s.skipped());
    EXPECT_EQ(r.scale(), 256.0);
    EXPECT_EQ(r.skipped(), 3);
    EXPECT_THROW(r.restore(0.0, 0, 0), Error);
    o.growth_factor = 0.5;
    EXPECT_THROW(DynamicLossScale{o}, Error);
}

}  // namespace
}  // namespace loom
