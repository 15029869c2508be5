// The cluster planner's arithmetic against the published formulas it
// implements: FLOPs (Narayanan et al. SC21 eq. 3, Korthikanti et al. 2022
// eq. 7; eq. 8 counts selective recompute differently, see below), the first stage's activations under 1F1B and interleaving
// (Korthikanti section 4.2.3: L layers' worth, times 1 + (p-1)/(pv)), ZeRO's
// 16 bytes per parameter and its shards, and the simulated bubble against the
// closed form (p-1)/(m+p-1).
#include <gtest/gtest.h>

#include <cmath>

#include "core/check.h"
#include "parallel/gpu_plan.h"

namespace loom {
namespace {

PlanModel gpt(int64_t L, int64_t h, int64_t a) {
    PlanModel m;
    m.layers = m.distinct_blocks = L;
    m.hidden = m.embedding = h;
    m.heads = a;
    m.intermediate = 4 * h;
    m.vocab = 51200;
    m.positions = 2048;
    m.lm_head = m.causal = true;
    return m;
}

GpuJob job_175b(int nodes) {
    GpuJob j;
    j.model = gpt(96, 12288, 96);
    j.seq = 2048;
    j.nodes = nodes;
    j.machine = gpu_profile_by_name("a100-80gb-sxm");
    return j;
}

TEST(GpuPlan, FlopsMatchThePublishedFormulas) {
    const PlanModel m = gpt(96, 12288, 96);
    const double B = 64, s = 2048, l = 96, h = 12288, V = 51200;
    const double eq7 = 72 * B * l * s * h * h * (1 + s / (6 * h) + V / (12 * h * l));
    const double eq8 = 72 * B * l * s * h * h * (1 + s / (3 * h) + V / (12 * h * l));
    const double eq3 = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    EXPECT_NEAR(gpu_model_flops(m, 2048, 64) / eq7, 1.0, 1e-12);
    // Selective recompute reruns the forward of Q K^T and of the product
    // with V: 4 B L s^2 h. Korthikanti's eq. 8 adds three times that (its
    // s/(3h) doubles the whole forward + backward attention term); the plan
    // counts the recomputed forward only, a third of eq. 8's extra.
    GpuLayout sel;
    sel.recompute = Recompute::selective;
    EXPECT_NEAR((gpu_hardware_flops(m, 2048, 64, sel) - eq7) / ((eq8 - eq7) / 3), 1.0, 1e-9);
    GpuLayout full;
    full.recompute = Recompute::full;
    EXPECT_NEAR(gpu_hardware_flops(m, 2048, 64, full) / eq3, 1.0, 1e-12);
}

TEST(GpuPlan, FirstStageHoldsLLayersUnder1F1BAndMoreWhenInterleaved) {
    const GpuJob j = job_175b(8);
    GpuLayout l;
    l.dp = 1, l.tp = 8, l.pp = 8, l.micro_batch = 1, l.global_batch = 64;
    l.sequence_parallel = true;
    l.recompute = Recompute::selective;
    const double per_layer = gpu_layer_activation_bytes(j.model, j.seq, l);
    const double sbh = 2048.0 * 12288;
    auto layers_kept = [&](const GpuMemory& m) {
        // Minus the embedding dropout masks (sbh/t per micro-batch in flight).
        return (m.activations - sbh / 8 * std::min(m.in_flight, 64)) / per_layer;
    };
    const GpuMemory f = gpu_plan_memory(j, l);
    EXPECT_TRUE(f.first_stage);
    EXPECT_NEAR(layers_kept(f), 96.0, 1e-9);
    l.schedule = ScheduleKind::interleaved;
    l.virtual_stages = 3;
    const GpuMemory iv = gpu_plan_memory(j, l);
    EXPECT_NEAR(layers_kept(iv), 96.0 * (1 + 7.0 / (8 * 3)), 1e-9);
}

TEST(GpuPlan, ModelStateIs16BytesPerParameterAndZeroShardsIt) {
    const GpuJob j = job_175b(8);
    GpuLayout l;
    l.dp = 8, l.tp = 8, l.pp = 1, l.micro_batch = 1, l.global_batch = 64;
    const double P = gpu_stage_params(j.model, j.seq, l, true);
    GpuMemory m = gpu_plan_memory(j, l);
    EXPECT_NEAR((m.weights + m.grads + m.optimizer) / P, 16.0, 1e-9);
    l.zero_stage = 1;
    m = gpu_plan_memory(j, l);
    EXPECT_NEAR((m.weights + m.grads + m.optimizer) / P, 2 + 2 + 12.0 / 8, 1e-9);
    l.zero_stage = 2;
    m = gpu_plan_memory(j, l);
    EXPECT_NEAR((m.weights + m.grads + m.optimizer) / P, 2 + (2 + 12.0) / 8, 1e-9);
    // 175B over tp 8: a little over an eighth of the parameters per GPU (the
    // replicated LayerNorms and position table).
    EXPECT_NEAR(P / (174.6e9 / 8), 1.0, 0.01);
}

TEST(GpuPlan, SimulatedBubbleMatchesTheClosedFormFor1F1B) {
    const GpuJob j = job_175b(8);
    for (int64_t global : {16, 64, 256}) {
        GpuLayout l;
        l.dp = 1, l.tp = 8, l.pp = 8, l.micro_batch = 1, l.global_batch = global;
        l.recompute = Recompute::full;
        const GpuTime t = gpu_plan_time(j, l);
        const double m = double(global), p = 8;
        EXPECT_NEAR(t.bubble, (p - 1) / (m + p - 1), 0.01) << global << " micro-batches";
    }
}

TEST(GpuPlan, SearchPutsFeasibleFirstAndFastestFirst) {
    GpuJob j = job_175b(8);
    GpuSearchBounds b;
    b.max_pp = 16;
    const std::vector<GpuPlanRow> rows = gpu_plan_search(j, 64, b);
    ASSERT_FALSE(rows.empty());
    ASSERT_TRUE(rows[0].feasible);
    bool seen_infeasible = false;
    for (size_t i = 0; i < rows.size(); ++i) {
        if (!rows[i].feasible) {
            seen_infeasible = true;
            EXPECT_FALSE(rows[i].reason.empty());
            continue;
        }
        EXPECT_FALSE(seen_infeasible) << "feasible row after an infeasible one";
        if (i > 0 && rows[i - 1].feasible) {
            EXPECT_LE(rows[i - 1].time.step_s, rows[i].time.step_s);
        }
        EXPECT_LE(rows[i].layout.pp, 16);
        EXPECT_LE(rows[i].memory.total, 80.0 * (1 << 30));
    }
    // 175B does not fit a single 8-GPU node's worth of tensor parallelism.
    for (const GpuPlanRow& r : rows)
        if (r.layout.pp == 1) {
            EXPECT_FALSE(r.feasible);
        }
}

TEST(GpuPlan, LayoutStringsRoundTripAndRejectUnknownKeys) {
    const GpuLayout l = parse_gpu_layout(
        "dp=8,tp=4,pp=12,micro_batch=2,global_batch=2048,recompute=full,virtual_stages=2,"
        "sequence_parallel=true,zero_stage=1,precision=fp16,attention=fused");
    EXPECT_EQ(l.dp, 8);
    EXPECT_EQ(l.tp, 4);
    EXPECT_EQ(l.pp, 12);
    EXPECT_EQ(l.micro_batch, 2);
    EXPECT_EQ(l.global_batch, 2048);
    EXPECT_EQ(l.recompute, Recompute::full);
    EXPECT_EQ(l.schedule, ScheduleKind::interleaved);
    EXPECT_EQ(l.virtual_stages, 2);
    EXPECT_TRUE(l.sequence_parallel);
    EXPECT_EQ(l.zero_stage, 1);
    EXPECT_EQ(l.precision, "fp16");
    EXPECT_TRUE(l.fused_attention);
    EXPECT_THROW(parse_gpu_layout("dp=8,tpp=2"), Error);
    EXPECT_THROW(parse_gpu_layout("dp=-1"), Error);
    EXPECT_THROW(parse_gpu_layout("recompute=some"), Error);
}

}  // namespace
}  // namespace loom
