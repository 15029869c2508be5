// The layout cost model against what Loom really allocates: parameter counts
// of every fixture model, the activation arena of a real forward, ZeRO
// shards, checkpointing, the pipeline bubble of the simulated schedule, and
// the enumeration of layouts.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "models/model.h"
#include "models/model_config.h"
#include "parallel/layout_plan.h"
#include "train/plan_model.h"

namespace loom {
namespace {

std::string fixture(const std::string& name) {
    return std::string(LOOM_TEST_DATA_DIR) + "/hf/" + name;
}

PlanModel bert_mlm() {
    return plan_model_from_config(load_hf_config(fixture("bert-mlm")));
}

TEST(LayoutPlan, ParameterCountsMatchTheBuiltModels) {
    for (const char* name : {"bert-mlm", "bert-cls", "bert-qa", "roberta-cls", "distilbert-mlm",
                             "distilbert-cls", "albert-mlm", "albert-cls", "gpt2-lm"}) {
        SCOPED_TRACE(name);
        const ModelConfig c = load_hf_config(fixture(name));
        const auto model = build_model(c);
        const PlanModel m = plan_model_from_config(c);
        const double built = double(model->params().num_parameters());
        // DistilBERT's sinusoidal table and ALBERT's extra decoder bias are the
        // only rows the shape formulas may count differently: within 2%.
        EXPECT_NEAR(double(m.total_params), built, 0.02 * built);
    }
}

// Runs one forward with labels at (B, T) and returns the arena's bytes.
int64_t measured_activation_bytes(const ModelConfig& c, int64_t B, int64_t T,
                                  int64_t checkpoint_every = 0) {
    auto model = build_model(c);
    model->init(1);
    model->set_activation_checkpointing(checkpoint_every);
    model->set_logits_scope(LogitsScope::labelled_positions);
    std::vector<int64_t> ids(size_t(B * T)), mask(size_t(B * T), 1), labels(size_t(B * T), -100);
    for (int64_t i = 0; i < B * T; ++i) {
        ids[size_t(i)] = 5 + i % (c.vocab_size - 5);
        if (i % 7 == 0 || c.task == Task::causal_lm) labels[size_t(i)] = ids[size_t(i)];
    }
    std::vector<int64_t> cls_labels(size_t(B), 1);
    ModelInputs in;
    in.B = B;
    in.T = T;
    in.input_ids = ids.data();
    in.attention_mask = mask.data();
    in.labels = c.task == Task::sequence_classification ? cls_labels.data() : labels.data();
    model->forward(in, DropoutPlan{});
    return model->activation_bytes();
}

TEST(LayoutPlan, ActivationMemoryMatchesTheArena) {
    for (const char* name : {"bert-mlm", "gpt2-lm", "albert-mlm", "distilbert-cls"}) {
        SCOPED_TRACE(name);
        const ModelConfig c = load_hf_config(fixture(name));
        const PlanModel m = plan_model_from_config(c);
        for (auto [B, T] : {std::pair<int64_t, int64_t>{4, 32}, {8, 64}}) {
            PlanWorkload w{B, T};
            const MemoryPlan p = plan_memory(m, w, LayoutChoice{});
            const double predicted = p.activations_per_micro + p.workspace;
            const double measured = double(measured_activation_bytes(c, B, T));
            ASSERT_GT(measured, 0);
            // The arena rounds each buffer up to 16 floats.
            EXPECT_NEAR(predicted, measured, 0.03 * measured) << "B " << B << " T " << T;
        }
    }
}

// Activation checkpointing as the model runs it (every k-th application
// shares one set of saved activations) against the plan's formula.
TEST(LayoutPlan, CheckpointedActivationMemoryMatchesTheArena) {
    for (const char* name : {"bert-mlm", "gpt2-lm", "albert-mlm", "distilbert-cls"}) {
        SCOPED_TRACE(name);
        ModelConfig c = load_hf_config(fixture(name));
        c.num_hidden_layers = 6;
        const PlanModel m = plan_model_from_config(c);
        PlanWorkload w{8, 64};
        const double plain = double(measured_activation_bytes(c, 8, 64));
        for (int every : {1, 2, 4}) {
            LayoutChoice l;
            l.checkpointing = true;
            l.checkpoint_every = every;
            const MemoryPlan p = plan_memory(m, w, l);
            const double predicted = p.activations_per_micro + p.workspace;
            const double measured = double(measured_activation_bytes(c, 8, 64, every));
            EXPECT_LT(measured, plain);
            EXPECT_NEAR(predicted, measured, 0.03 * measured) << "every " << every;
        }
    }
}

TEST(LayoutPlan, ZeroShardsOptimizerStateAndCheckpointingKeepsBlockOutputs) {
    PlanModel m = bert_mlm();
    m.layers = m.distinct_blocks = 8;
    PlanWorkload w{8, 64};
    LayoutChoice ddp;
    ddp.dp = 4;
    LayoutChoice z1 = ddp;
    z1.zero_stage = 1;
    const MemoryPlan a = plan_memory(m, w, ddp), b = plan_memory(m, w, z1);
    EXPECT_DOUBLE_EQ(a.optimizer, 2 * a.params);
    EXPECT_DOUBLE_EQ(b.optimizer, a.optimizer / 4);
    EXPECT_DOUBLE_EQ(b.grads, a.grads + a.params / 4);

    LayoutChoice ck;
    ck.checkpointing = true;
    const MemoryPlan full = plan_memory(m, w, LayoutChoice{}), kept = plan_memory(m, w, ck);
    const double N = double(w.micro_batch * w.seq);
    const double out = 4 * N * double(m.hidden);
    const double per_app = full.activations_per_micro / double(m.layers);
    // Every block keeps its output; one block's internals are rebuilt at a time.
    EXPECT_NEAR(kept.activations_per_micro, double(m.layers) * out + (per_app - out),
                1e-6 * per_app);
    ck.checkpoint_every = 2;
    const MemoryPlan half = plan_memory(m, w, ck);
    EXPECT_GT(half.activations_per_micro, kept.activations_per_micro);
    EXPECT_LT(half.activations_per_micro, full.activations_per_micro);
}

// ZeRO reduce-scatters the gradients beside backward and all-gathers the
// parameters after the step: an all-reduce's bytes, half of them exposed.
// With a rank per core 40% of what runs beside backward hides; with more
// ranks than cores none does (the cores are busy computing already).
TEST(LayoutPlan, ZeroMovesAnAllReducesBytesAndExposesItsAllGather) {
    PlanModel m = bert_mlm();
    PlanWorkload w{8, 64};
    LayoutChoice ddp;
    ddp.dp = 4;
    LayoutChoice z1 = ddp, z2 = ddp;
    z1.zero_stage = 1;
    z2.zero_stage = 2;
    MachineModel mc;
    mc.allreduce_gbps = 1;
    mc.latency_s = 0;
    mc.cores = 4;
    const double bytes = plan_memory(m, w, ddp).params;
    const double ring = 2.0 * 3 / 4 * bytes / 1e9;
    EXPECT_NEAR(plan_time(m, w, ddp, mc, 4).dp_comm_s, 0.6 * ring, 1e-12);
    EXPECT_NEAR(plan_time(m, w, z1, mc, 4).dp_comm_s, 0.8 * ring, 1e-12);
    EXPECT_NEAR(plan_time(m, w, z2, mc, 4).dp_comm_s, 0.8 * ring, 1e-12);
    MachineModel shared = mc;
    shared.cores = 2;
    EXPECT_NEAR(plan_time(m, w, ddp, shared, 4).dp_comm_s, ring, 1e-12);
    EXPECT_NEAR(plan_time(m, w, z1, shared, 4).dp_comm_s, ring, 1e-12);
    // Two nodes of 2 ranks on 2 cores each: a rank per core again.
    shared.ranks_per_node = 2;
    EXPECT_NEAR(plan_time(m, w, ddp, shared, 4).dp_comm_s, 0.6 * ring, 1e-12);
}

// AdamW's update is priced at the measured rate: a rank's parameters, or
// its ZeRO shard, and the node's updates over its cores when ranks share them.
TEST(LayoutPlan, OptimizerStepIsPricedAtTheMeasuredRate) {
    PlanModel m = bert_mlm();
    PlanWorkload w{8, 64};
    LayoutChoice ddp;
    ddp.dp = 8;
    LayoutChoice z1 = ddp;
    z1.zero_stage = 1;
    MachineModel mc;
    mc.cores = 2;
    EXPECT_EQ(plan_time(m, w, ddp, mc, 8).optimizer_s, 0) << "not measured: not priced";
    mc.adamw_params_per_s = 1e8;
    const double P = double(m.total_params);
    ASSERT_DOUBLE_EQ(plan_memory(m, w, ddp).params, 4 * P);
    // 8 replicas on 2 cores: each core updates 4 of them, or 4 shards of 1/8.
    const TimePlan a = plan_time(m, w, ddp, mc, 8), b = plan_time(m, w, z1, mc, 8);
    EXPECT_NEAR(a.optimizer_s, 4 * P / 1e8, 1e-9);
    EXPECT_NEAR(b.optimizer_s, 4 * (P / 8) / 1e8, 1e-9);
    EXPECT_NEAR(a.step_s, a.compute_s + a.tp_comm_s + a.pp_comm_s + a.dp_comm_s + a.optimizer_s,
                1e-12);
    // One rank with the node to itself: its threads share the update.
    LayoutChoice one;
    EXPECT_NEAR(plan_time(m, w, one, mc, 1).optimizer_s, P / 2e8, 1e-9);
    // A pipeline on shared cores: the stages' own parameters, not the busiest
    // stage's times the ranks (the tied head's table is a second copy).
    LayoutChoice pp;
    pp.pp = 4;
    pp.dp = 2;
    ASSERT_TRUE(m.lm_head && m.tied_head);
    const double tied = double(m.vocab) * double(m.embedding);
    EXPECT_NEAR(plan_time(m, w, pp, mc, 8).optimizer_s, 2 * (P + tied) / 2e8, 1e-9)
        << "2 replicas of 4 stages on 2 cores";
}

// The collective wait on shared cores follows the tp group's size where it
// was measured by size: as measured at a size, linear in log2 between sizes.
TEST(LayoutPlan, CollectiveWaitAndBandwidthFollowTheGroupSize) {
    MachineModel mc;
    mc.shared_sync_s = 0.01;
    mc.shared_sync_ranks = 8;
    EXPECT_EQ(shared_sync_for(mc, 2), 0.01) << "no table: one figure for every group";
    mc.shared_sync_by_group = {{2, 0.002}, {8, 0.01}};
    EXPECT_DOUBLE_EQ(shared_sync_for(mc, 2), 0.002);
    EXPECT_DOUBLE_EQ(shared_sync_for(mc, 8), 0.01);
    EXPECT_DOUBLE_EQ(shared_sync_for(mc, 4), 0.006);
    EXPECT_DOUBLE_EQ(shared_sync_for(mc, 16), 0.01) << "beyond the table: its last entry";

    // In the step: a tp 2 layout pays the groups-of-2 figure.
    PlanModel m = bert_mlm();
    PlanWorkload w{2, 64, 4};
    LayoutChoice l;
    l.tp = 2;
    l.dp = 4;
    MachineModel by_size = mc, flat = mc, none = mc;
    flat.shared_sync_by_group.clear();
    flat.shared_sync_s = 0.002;
    none.shared_sync_by_group.clear();
    none.shared_sync_s = 0;
    const double base = plan_time(m, w, l, none, 8).tp_comm_s;
    EXPECT_GT(plan_time(m, w, l, by_size, 8).tp_comm_s, base);
    EXPECT_DOUBLE_EQ(plan_time(m, w, l, by_size, 8).tp_comm_s,
                     plan_time(m, w, l, flat, 8).tp_comm_s);

    // The all-reduce bandwidth by group size: tp collectives at the tp
    // group's, the gradient reduction at the dp group's.
    MachineModel bw = none, bw2 = none, bw4 = none;
    bw.allreduce_gbps_by_group = {{2, 4.0}, {8, 1.0}};
    EXPECT_DOUBLE_EQ(allreduce_gbps_for(bw, 4), 2.5);
    bw2.allreduce_gbps = 4.0;
    bw4.allreduce_gbps = 2.5;
    const TimePlan a = plan_time(m, w, l, bw, 8), b = plan_time(m, w, l, bw2, 8),
                   c = plan_time(m, w, l, bw4, 8);
    EXPECT_DOUBLE_EQ(a.tp_comm_s, b.tp_comm_s) << "tp 2";
    EXPECT_DOUBLE_EQ(a.dp_comm_s, c.dp_comm_s) << "dp 4";

    // ZeRO's reduce-scatter plus all-gather at its own measured rate (the
    // runtime runs it differently from an all-reduce), the all-reduce's
    // where it was not measured.
    LayoutChoice z = l;
    z.zero_stage = 1;
    MachineModel zr = bw;
    EXPECT_DOUBLE_EQ(zero_gbps_for(zr, 4), 2.5);
    MachineModel same = zr;
    same.zero_gbps_by_group = {{2, 2.5}, {8, 2.5}};
    EXPECT_DOUBLE_EQ(plan_time(m, w, z, same, 8).dp_comm_s, plan_time(m, w, z, bw, 8).dp_comm_s);
    zr.zero_gbps_by_group = {{2, 8.0}, {8, 2.0}};
    EXPECT_DOUBLE_EQ(zero_gbps_for(zr, 4), 5.0);
    EXPECT_LT(plan_time(m, w, z, zr, 8).dp_comm_s, plan_time(m, w, z, bw, 8).dp_comm_s);
    EXPECT_DOUBLE_EQ(plan_time(m, w, l, zr, 8).dp_comm_s, a.dp_comm_s) << "no ZeRO";

    // Cores that run slower with all of them busy stretch the compute.
    MachineModel busy = none;
    busy.all_cores_share = 0.8;
    EXPECT_NEAR(plan_time(m, w, l, busy, 8).compute_s, plan_time(m, w, l, none, 8).compute_s / 0.8,
                1e-9);
}

// A tp all-reduce's whole cost as measured between compute segments, by
// group and buffer size: it replaces the transfer plus the shared-core wait
// where the node runs the ranks it was measured with.
TEST(LayoutPlan, TpCollectivesArePricedAtTheirMeasuredCostBySize) {
    MachineModel mc;
    mc.shared_sync_s = 0.01;
    mc.shared_sync_ranks = 8;
    EXPECT_EQ(tp_collective_s(mc, 2, 1 << 20), -1.0) << "not measured";
    mc.tp_collective_by_group = {{2, 1 << 18, 0.001},
                                 {2, 1 << 20, 0.002},
                                 {2, 1 << 22, 0.008},
                                 {8, 1 << 18, 0.003},
                                 {8, 1 << 20, 0.006}};
    EXPECT_DOUBLE_EQ(tp_collective_s(mc, 2, 1 << 20), 0.002);
    EXPECT_DOUBLE_EQ(tp_collective_s(mc, 2, 1 << 21), 0.004) << "between sizes: linear in bytes";
    EXPECT_DOUBLE_EQ(tp_collective_s(mc, 2, 1 << 23), 0.016) << "beyond: the last two's line";
    EXPECT_DOUBLE_EQ(tp_collective_s(mc, 2, 0), 0.001 - 0.001 / 3) << "below: the first two's line";
    EXPECT_DOUBLE_EQ(tp_collective_s(mc, 2, 1e9), 0.008 + (1e9 - (1 << 22)) * 0.006 / (3 << 20));
    EXPECT_DOUBLE_EQ(tp_collective_s(mc, 4, 1 << 20), 0.004) << "groups: linear in log2";
    EXPECT_DOUBLE_EQ(tp_collective_s(mc, 16, 1 << 20), 0.006) << "beyond: the last group";

    // In the step: 4 micro-batches x the blocks x 4 all-reduces of 2 x 64
    // tokens x hidden 64 x 4 bytes (32 KiB) at tp 2, 8 ranks on 2 cores.
    PlanModel m = bert_mlm();
    ASSERT_EQ(m.hidden, 64);
    PlanWorkload w{2, 64, 4};
    LayoutChoice l;
    l.tp = 2;
    l.dp = 4;
    mc.tp_collective_by_group = {{2, 16384, 0.001}, {2, 65536, 0.002}};
    const double each = tp_collective_s(mc, 2, 4.0 * 2 * 64 * 64);
    EXPECT_DOUBLE_EQ(each, 0.001 + 0.001 / 3);
    EXPECT_NEAR(plan_time(m, w, l, mc, 8).tp_comm_s, 4 * double(m.layers) * 4 * each, 1e-12);
    // Another rank count than measured: the transfer and the scaled wait.
    MachineModel at4 = mc, old = mc;
    at4.shared_sync_ranks = 4;
    old.tp_collective_by_group.clear();
    old.shared_sync_ranks = 4;
    EXPECT_DOUBLE_EQ(plan_time(m, w, l, at4, 8).tp_comm_s, plan_time(m, w, l, old, 8).tp_comm_s);
    l.tp = 1;
    l.dp = 8;
    EXPECT_EQ(plan_time(m, w, l, mc, 8).tp_comm_s, 0.0) << "no tp, no tp collective";
}

// The trainer builds one model instance per micro-batch in flight (and per
// chunk when interleaved), each with an arena of its own, so a stage's
// workspace counts once per instance; one process has one.
TEST(LayoutPlan, PipelineWorkspaceIsCountedPerModelInstance) {
    PlanModel m = bert_mlm();
    m.layers = m.distinct_blocks = 8;
    PlanWorkload w{2, 32};
    LayoutChoice l;
    l.pp = 2;
    l.schedule = ScheduleKind::simple;
    w.microbatches = 1;
    const MemoryPlan one = plan_memory(m, w, l);
    w.microbatches = 4;
    const MemoryPlan four = plan_memory(m, w, l);
    ASSERT_EQ(one.in_flight, 1);
    ASSERT_EQ(four.in_flight, 4);  // GPipe: every micro-batch in flight at once
    EXPECT_NEAR(four.workspace, 4 * one.workspace, 1e-9 * four.workspace);
    LayoutChoice il = l;
    il.schedule = ScheduleKind::interleaved;
    il.virtual_stages = 2;
    const MemoryPlan chunks = plan_memory(m, w, il);
    EXPECT_NEAR(chunks.workspace, double(chunks.in_flight) * 2 * one.workspace,
                1e-9 * chunks.workspace);
    const LayoutChoice whole;
    PlanWorkload w1 = w;
    w1.microbatches = 1;
    EXPECT_EQ(plan_memory(m, w, whole).workspace, plan_memory(m, w1, whole).workspace)
        << "one process: one arena whatever the micro-batch count";
}

TEST(LayoutPlan, PipelineBubbleIsTheSimulatedSchedules) {
    PlanModel m = bert_mlm();
    m.layers = m.distinct_blocks = 8;
    PlanWorkload w{2, 32, 8};
    MachineModel mc;
    for (ScheduleKind k : {ScheduleKind::simple, ScheduleKind::one_f_one_b}) {
        LayoutChoice l;
        l.pp = 4;
        l.schedule = k;
        const TimePlan t = plan_time(m, w, l, mc, 4);
        EXPECT_NEAR(t.bubble, schedule_bubble_theory(k, 4, 8, 1), 1e-9);
        EXPECT_GT(t.step_s, t.compute_s);  // activations cross stages
    }
}

// A pipeline whose ranks share the node's cores: each busy rank runs at the
// kernel's fair share, so the step follows the work of the ranks busy at
// each moment, stage by stage, not the busiest stage times the ranks.
TEST(LayoutPlan, PipelineRanksSharingCoresArePricedByTheirOwnWork) {
    PlanModel m = bert_mlm();
    m.layers = m.distinct_blocks = 8;
    PlanWorkload w{2, 32};
    MachineModel mc;
    mc.cores = 1;
    const double core_rate = mc.gflops_per_core * 1e9;
    // The whole model's forward and backward for one micro-batch, one core.
    const double model_s =
        3 * forward_flops_per_token(m, w.seq) * double(w.micro_batch * w.seq) / core_rate;
    LayoutChoice l;
    l.pp = 4;
    l.schedule = ScheduleKind::simple;
    // One micro-batch crosses the stages one after another: exactly the
    // whole model's time, however unequal the stages (the head makes the
    // last one heavier).
    w.microbatches = 1;
    EXPECT_NEAR(plan_time(m, w, l, mc, 4).compute_s, model_s, 1e-3 * model_s);
    // One core under 2 pipelines of 4 stages: it is never idle, so the step
    // is every rank's work added up.
    l.dp = 2;
    w.microbatches = 4;
    for (ScheduleKind k : {ScheduleKind::simple, ScheduleKind::one_f_one_b}) {
        l.schedule = k;
        EXPECT_NEAR(plan_time(m, w, l, mc, 8).compute_s, 2 * 4 * model_s, 1e-3 * 2 * 4 * model_s);
    }
    // Enough cores for every rank (2 threads each): the schedule's own
    // makespan, longer than the work spread evenly over the cores.
    mc.cores = 16;
    const TimePlan own = plan_time(m, w, l, mc, 8);
    EXPECT_GT(own.compute_s, 2 * 4 * model_s / 16 * 1.05);
    EXPECT_LT(own.compute_s, 4 * model_s / 2);
}

// Tensor parallelism narrows each rank's linear layers; with a measured
// narrow-side curve their GEMMs run slower, worked out here by hand.
TEST(LayoutPlan, NarrowTensorParallelShardsRunAtTheirMeasuredRate) {
    PlanModel m = bert_mlm();
    m.hidden = m.embedding = 1024;
    m.heads = 16;
    m.kv_heads = 0;
    m.intermediate = 4096;
    m.gated_mlp = false;
    ASSERT_EQ(m.kv_width(), 1024);
    const int64_t T = 128;
    // half 1024: a d-wide side runs at 2d / (d + 1024) of d = 1024's rate.
    // tp 2: q|k|v 1024 x 1536 and the MLP's 1024 x 2048 and 2048 x 1024 keep
    // a 1024-wide side; the attention output is 512 x 1024, at 2/3 the rate.
    const double linear = 1024.0 * 1536 + 512.0 * 1024 + 1024.0 * 2048 + 2048.0 * 1024;
    const double linear_time = 1024.0 * 1536 + 512.0 * 1024 * 1.5 + 1024.0 * 2048 + 2048.0 * 1024;
    const double attention = 2.0 * T * 1024 / 2;
    EXPECT_NEAR(block_narrow_factor(m, T, 2, 1024),
                (linear_time + attention) / (linear + attention), 1e-12);
    EXPECT_EQ(block_narrow_factor(m, T, 1, 1024), 1.0) << "every side is 1024 wide";
    EXPECT_EQ(block_narrow_factor(m, T, 2, 0), 1.0) << "not measured: no dependence";
    EXPECT_GT(block_narrow_factor(m, T, 8, 1024), block_narrow_factor(m, T, 2, 1024));

    // In the step: each block's time grows by the factor, the embeddings and
    // the head's do not.
    PlanWorkload w{2, T, 4};
    LayoutChoice l;
    l.tp = 2;
    MachineModel flat, narrow;
    narrow.gemm_half_narrow = 1024;
    const double f = block_narrow_factor(m, T, 2, 1024);
    const double whole = forward_flops_per_token(m, T),
                 blocks = m.layers * layer_flops_per_token(m, T);
    EXPECT_NEAR(plan_time(m, w, l, narrow, 2).compute_s / plan_time(m, w, l, flat, 2).compute_s,
                (whole + blocks * (f - 1)) / whole, 1e-9);
}

TEST(LayoutPlan, EnumeratesEveryLayoutOfTheWorldAndRanksThem) {
    ModelConfig c = load_hf_config(fixture("bert-mlm"));
    c.num_attention_heads = 6;  // tp 4 and tp 8 cannot split 6 heads
    c.num_hidden_layers = 4;    // pp 8 has more stages than layers
    c.intermediate_size = 48;
    c.hidden_size = 24;
    const PlanModel m = plan_model_from_config(c);
    PlanRequest q;
    q.world = 8;
    q.global_batch = 16;
    q.seq = 32;
    q.microbatches = 2;
    q.zero_stage = 1;
    const auto rows = plan_layouts(m, q, MachineModel{});
    std::set<std::tuple<int, int, int>> seen;
    bool sorted = true, saw_heads = false, saw_stages = false;
    double last = 0;
    bool in_feasible = true;
    for (const PlanRow& r : rows) {
        EXPECT_EQ(r.layout.dp * r.layout.tp * r.layout.pp, 8);
        seen.insert({r.layout.dp, r.layout.tp, r.layout.pp});
        if (!r.feasible) {
            in_feasible = false;
            saw_heads |= r.why_not.find("heads") != std::string::npos;
            saw_stages |= r.why_not.find("stages") != std::string::npos;
            continue;
        }
        EXPECT_TRUE(in_feasible) << "feasible rows come first";
        sorted &= r.time.step_s >= last;
        last = r.time.step_s;
        EXPECT_EQ(r.workload.micro_batch * r.workload.microbatches * r.layout.dp, 16);
        EXPECT_GT(r.memory.peak, r.memory.params);
    }
    EXPECT_TRUE(sorted);
    EXPECT_EQ(seen.size(), 10u);  // ordered factorisations of 8 into three degrees
    EXPECT_TRUE(saw_heads);
    EXPECT_TRUE(saw_stages);
}

}  // namespace
}  // namespace loom
