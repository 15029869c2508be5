// The CPU planner's tensor-parallel blocks: the memory-bound kernels every
// tp rank runs on whole rows, priced beside the GEMMs tp divides.
#include <gtest/gtest.h>

#include "models/model_config.h"
#include "parallel/layout_plan.h"
#include "train/plan_model.h"

namespace loom {
namespace {

PlanModel bert_mlm() {
    return plan_model_from_config(load_hf_config(std::string(LOOM_TEST_DATA_DIR) + "/hf/bert-mlm"));
}

// Norms and residuals run on whole rows on every tp rank, so a block's
// non-GEMM time (1 - step_efficiency, measured at tp 1) shrinks with tp only
// in its split kernels' share. A BERT-large block at seq 128 in fp32 with
// dropout: norms and residuals (4 + 4 + 2 x 7) x 1024 x 4 / 2 = 45056 bytes a
// token, GeLU 2 x 4096 x 4 = 32768, softmax and attention dropout
// 16 x 128 x 17 = 34816: a replicated share of 0.4.
TEST(LayoutPlan, NormsAndResidualsRunWholeOnEveryTpRank) {
    PlanModel big = bert_mlm();
    big.hidden = 1024, big.intermediate = 4096, big.heads = 16;
    big.hidden_dropout = big.attention_dropout = true;  // the fixture trains without
    const BlockElementwiseBytes b = block_elementwise_bytes(big, 128, 4, false);
    EXPECT_DOUBLE_EQ(b.replicated, 45056);
    EXPECT_DOUBLE_EQ(b.mlp, 32768);
    EXPECT_DOUBLE_EQ(b.attention, 34816);
    EXPECT_DOUBLE_EQ(block_elementwise_bytes(big, 128, 4, true).attention, 0) << "fused";
    EXPECT_DOUBLE_EQ(block_replicated_factor(big, 128, 8, 0.5), 1 + 0.5 * 0.4 * 7);
    EXPECT_DOUBLE_EQ(block_replicated_factor(big, 128, 1, 0.5), 1) << "tp 1: as measured";
    EXPECT_DOUBLE_EQ(block_replicated_factor(big, 128, 8, 1.0), 1) << "GEMMs only";

    // In the step: at half the GEMM rate a tp 2 layout's blocks take 2 x the
    // factor as long, its embeddings and head 2 x.
    PlanModel m = bert_mlm();
    PlanWorkload w{2, 64, 4};
    LayoutChoice l;
    l.tp = 2;
    MachineModel flat, half;
    half.step_efficiency = 0.5;
    const double tokens = 2.0 * 64, f = block_replicated_factor(m, 64, 2, 0.5);
    ASSERT_GT(f, 1.0);
    const double whole = forward_flops_per_token(m, 64) * tokens / 2,
                 blocks = double(m.layers) * layer_flops_per_token(m, 64) * tokens / 2;
    EXPECT_NEAR(plan_time(m, w, l, half, 2).compute_s / plan_time(m, w, l, flat, 2).compute_s,
                2 * (whole + (f - 1) * blocks) / whole, 1e-9);
    l.tp = 1;
    l.dp = 2;
    EXPECT_NEAR(plan_time(m, w, l, half, 2).compute_s / plan_time(m, w, l, flat, 2).compute_s, 2,
                1e-9)
        << "no tp: the measured rate alone";
}

}  // namespace
}  // namespace loom
