// Pipeline schedules: exact lists for small cases (derived by hand from the
// GPipe / PipeDream-flush / Megatron-interleaved definitions), then a sweep
// over stages 1..8 and micro-batches 1..16 in which the simulator must find no
// deadlock, matched messages, every micro-batch run once per stage, the
// theoretical bubble and the 1F1B memory bound.
#include <gtest/gtest.h>

#include <cmath>

#include "core/check.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/pipeline_sim.h"

using namespace loom;

namespace {

// Only the compute actions, "F0.0 F1.0 B0.0 ...".
std::string compute_only(const std::vector<Action>& actions) {
    std::vector<Action> c;
    for (const auto& a : actions)
        if (!action_is_comm(a.kind)) c.push_back(a);
    return actions_to_string(c);
}

struct Case {
    ScheduleKind kind;
    int v;
};

}  // namespace

TEST(PipelineSchedule, GPipeRunsAllForwardsThenAllBackwards) {
    auto s = make_schedule(ScheduleKind::simple, 3, 1, 3, 1);
    EXPECT_EQ(actions_to_string(s),
              "RA0.0 F0.0 SA0.0 RA1.0 F1.0 SA1.0 RA2.0 F2.0 SA2.0 "
              "RG0.0 B0.0 SG0.0 RG1.0 B1.0 SG1.0 RG2.0 B2.0 SG2.0");
}

TEST(PipelineSchedule, OneFOneBWarmupSteadyCooldown) {
    // p=4, m=8: rank 0 warms up with p-1 = 3 forwards, rank 3 none.
    EXPECT_EQ(compute_only(make_schedule(ScheduleKind::one_f_one_b, 4, 0, 8)),
              "F0.0 F1.0 F2.0 F3.0 B0.0 F4.0 B1.0 F5.0 B2.0 F6.0 B3.0 F7.0 B4.0 B5.0 B6.0 B7.0");
    EXPECT_EQ(compute_only(make_schedule(ScheduleKind::one_f_one_b, 4, 2, 8)),
              "F0.0 F1.0 B0.0 F2.0 B1.0 F3.0 B2.0 F4.0 B3.0 F5.0 B4.0 F6.0 B5.0 F7.0 B6.0 B7.0");
    EXPECT_EQ(compute_only(make_schedule(ScheduleKind::one_f_one_b, 4, 3, 3)),
              "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0");
    // Fewer micro-batches than stages: warm-up is capped by m.
    EXPECT_EQ(compute_only(make_schedule(ScheduleKind::one_f_one_b, 4, 0, 2)),
              "F0.0 F1.0 B0.0 B1.0");
    // Communication sits next to the compute it serves (middle stage).
    EXPECT_EQ(actions_to_string(make_schedule(ScheduleKind::one_f_one_b, 3, 1, 2)),
              "RA0.0 F0.0 SA0.0 RA1.0 F1.0 SA1.0 RG0.0 B0.0 SG0.0 RG1.0 B1.0 SG1.0");
}

TEST(PipelineSchedule, InterleavedFollowsMegatronOrder) {
    // p=2, v=2, m=4, rank 0: warm-up 2*(p-1) + (v-1)*p = 4 chunk forwards;
    // forwards walk chunk 0 on micro 0,1, chunk 1 on 0,1, then micro 2,3;
    // backwards start from the last chunk.
    EXPECT_EQ(compute_only(make_schedule(ScheduleKind::interleaved, 2, 0, 4, 2)),
              "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
    // rank 1: warm-up (v-1)*p = 2.
    EXPECT_EQ(compute_only(make_schedule(ScheduleKind::interleaved, 2, 1, 4, 2)),
              "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
    // The last rank's chunk 0 feeds rank 0's chunk 1 (wrap-around).
    auto last = make_schedule(ScheduleKind::interleaved, 2, 1, 4, 2);
    EXPECT_EQ(action_peer(Action{ActionKind::send_act, 0, 0}, 2, 1), 0);
    EXPECT_EQ(last.front(), (Action{ActionKind::recv_act, 0, 0}));
}

TEST(PipelineSchedule, RejectsInvalidArguments) {
    EXPECT_THROW(make_schedule(ScheduleKind::interleaved, 4, 0, 6, 2), Error);  // 6 % 4 != 0
    EXPECT_THROW(make_schedule(ScheduleKind::interleaved, 4, 0, 8, 1), Error);  // v < 2
    EXPECT_THROW(make_schedule(ScheduleKind::interleaved, 1, 0, 8, 2), Error);  // p < 2
    EXPECT_THROW(make_schedule(ScheduleKind::one_f_one_b, 4, 0, 8, 2), Error);  // v != 1
    EXPECT_THROW(make_schedule(ScheduleKind::simple, 4, 4, 8, 1), Error);       // rank
    EXPECT_THROW(make_schedule(ScheduleKind::simple, 4, 0, 0, 1), Error);       // m = 0
    EXPECT_THROW(schedule_kind_from_name("zigzag"), Error);
    EXPECT_EQ(schedule_kind_from_name("gpipe"), ScheduleKind::simple);
    EXPECT_EQ(schedule_kind_from_name("1f1b"), ScheduleKind::one_f_one_b);
}

TEST(PipelineSchedule, EverySizeRunsWithoutDeadlockAtTheoreticalBubble) {
    const Case cases[] = {{ScheduleKind::simple, 1},
                          {ScheduleKind::one_f_one_b, 1},
                          {ScheduleKind::interleaved, 2},
                          {ScheduleKind::interleaved, 3},
                          {ScheduleKind::interleaved, 4}};
    int checked = 0;
    for (const Case& c : cases) {
        for (int p = 1; p <= 8; ++p) {
            for (int m = 1; m <= 16; ++m) {
                if (!schedule_check(c.kind, p, m, c.v).empty()) continue;
                for (CommModel model : {CommModel::batched, CommModel::buffered}) {
                    SimOptions opt;
                    opt.comm = model;
                    SimResult r = simulate_schedule(c.kind, p, m, c.v, opt);
                    SCOPED_TRACE(testing::Message()
                                 << schedule_kind_name(c.kind) << " p=" << p << " m=" << m
                                 << " v=" << c.v << " model=" << int(model));
                    ASSERT_TRUE(r.ok) << r.error;
                    // Each rank: v*m forwards and v*m backwards of unit time.
                    for (int64_t b : r.busy) EXPECT_EQ(b, 2 * int64_t(m) * c.v);
                    const int S = p * c.v;
                    const int64_t expect_messages = 2 * int64_t(m) * (S - 1);
                    EXPECT_EQ(r.messages, expect_messages);
                    EXPECT_NEAR(r.bubble, schedule_bubble_theory(c.kind, p, m, c.v), 1e-12);
                    for (int rank = 0; rank < p; ++rank) {
                        EXPECT_LE(r.max_in_flight[size_t(rank)],
                                  schedule_max_in_flight(c.kind, p, rank, m, c.v));
                        if (c.kind == ScheduleKind::one_f_one_b) {
                            EXPECT_LE(r.max_in_flight[size_t(rank)], p - rank);
                            EXPECT_EQ(r.max_in_flight[size_t(rank)], std::min(m, p - rank));
                        }
                    }
                    ++checked;
                }
            }
        }
    }
    EXPECT_EQ(checked, 2 * (128 + 128 + 78));  // simple, 1f1b, interleaved v=2..4; two models
}

TEST(PipelineSchedule, BackwardTwiceForwardKeepsTheBubbleForGPipeAnd1F1B) {
    // With tb = 2 tf the idle time is still (p-1)(tf+tb) per rank.
    SimOptions opt;
    opt.backward_time = 2;
    for (ScheduleKind kind : {ScheduleKind::simple, ScheduleKind::one_f_one_b})
        for (int p = 1; p <= 8; ++p)
            for (int m = 1; m <= 16; ++m) {
                SimResult r = simulate_schedule(kind, p, m, 1, opt);
                ASSERT_TRUE(r.ok) << r.error;
                EXPECT_EQ(r.makespan, int64_t(m + p - 1) * 3)
                    << schedule_kind_name(kind) << " p=" << p << " m=" << m;
            }
}

TEST(PipelineSchedule, BackwardTwiceForwardKeepsTheInterleavedBubble) {
    SimOptions opt;
    opt.backward_time = 2;
    int checked = 0;
    for (int v = 2; v <= 4; ++v)
        for (int p = 2; p <= 8; ++p)
            for (int m = p; m <= 16; m += p) {
                SimResult r = simulate_schedule(ScheduleKind::interleaved, p, m, v, opt);
                ASSERT_TRUE(r.ok) << r.error;
                // Idle per rank: (p-1) chunk forward+backward times.
                EXPECT_EQ(r.makespan, int64_t(v * m + p - 1) * 3) << "p=" << p << " m=" << m
                                                                   << " v=" << v;
                ++checked;
            }
    EXPECT_EQ(checked, 78);
}

TEST(PipelineSchedule, InterleavedCutsTheBubbleByV) {
    // p=4, m=8: 1F1B idles 3/11 of the time, interleaved with v=2 3/19.
    SimResult plain = simulate_schedule(ScheduleKind::one_f_one_b, 4, 8, 1);
    SimResult inter = simulate_schedule(ScheduleKind::interleaved, 4, 8, 2);
    ASSERT_TRUE(plain.ok && inter.ok);
    EXPECT_NEAR(plain.bubble, 3.0 / 11.0, 1e-12);
    EXPECT_NEAR(inter.bubble, 3.0 / 19.0, 1e-12);
}

TEST(PipelineSchedule, OneFOneBUsesLessMemoryThanGPipe) {
    SimResult gpipe = simulate_schedule(ScheduleKind::simple, 4, 16, 1);
    SimResult ofob = simulate_schedule(ScheduleKind::one_f_one_b, 4, 16, 1);
    ASSERT_TRUE(gpipe.ok && ofob.ok);
    EXPECT_EQ(gpipe.max_in_flight[0], 16);
    EXPECT_EQ(ofob.max_in_flight[0], 4);
    EXPECT_EQ(gpipe.makespan, ofob.makespan);
}

TEST(PipelineSim, StagesOfUnequalWorkSetTheMakespan) {
    // GPipe, 2 stages, 2 micro-batches; stage 1 does 3x stage 0's work. By
    // hand: stage 0 forwards at [0, 1) and [1, 2); stage 1 at [1, 4) and
    // [4, 7), backwards at [7, 13) and [13, 19); stage 0 backwards each as
    // its gradient arrives, [13, 15) and [19, 21).
    SimOptions opt;
    opt.stage_forward_time = {1, 3};
    opt.stage_backward_time = {2, 6};
    const SimResult r = simulate_schedule(ScheduleKind::simple, 2, 2, 1, opt);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.makespan, 21);
    EXPECT_EQ(r.busy, (std::vector<int64_t>{6, 18}));
    ASSERT_EQ(r.spans.size(), 2u);
    for (size_t rank = 0; rank < 2; ++rank) {
        ASSERT_EQ(r.spans[rank].size(), 4u);  // 2 forwards, 2 backwards
        int64_t sum = 0, last_end = 0;
        for (const ComputeSpan& c : r.spans[rank]) {
            EXPECT_GE(c.start, last_end) << "a rank runs one thing at a time";
            sum += c.end - c.start;
            last_end = c.end;
        }
        EXPECT_EQ(sum, r.busy[rank]);
    }
    EXPECT_EQ(r.spans[1][1].start, 4);
    EXPECT_EQ(r.spans[0].back().end, 21);
    // One time per global stage, or the simulation refuses.
    opt.stage_backward_time = {2};
    const SimResult bad = simulate_schedule(ScheduleKind::simple, 2, 2, 1, opt);
    EXPECT_FALSE(bad.ok);
    EXPECT_NE(bad.error.find("1 per-stage times for 2 stages"), std::string::npos) << bad.error;
}

TEST(PipelineSim, ReportsDeadlockInsteadOfHanging) {
    // Both ranks receive before they send.
    std::vector<std::vector<Action>> lists = {
        {{ActionKind::recv_grad, 0, 0}, {ActionKind::forward, 0, 0}},
        {{ActionKind::recv_act, 0, 0}, {ActionKind::forward, 0, 0}}};
    SimResult r = simulate_pipeline(lists, 2, 1, 1);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("deadlock"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("rank 1 at RA0.0"), std::string::npos) << r.error;
}

TEST(PipelineSim, StrictRendezvousNeedsBatchedPosting) {
    // 1F1B's steady state pairs "send activation / receive gradient" on one
    // rank with "send gradient / receive activation" on its neighbour; with
    // one-at-a-time synchronous sends both sides send first.
    SimOptions opt;
    opt.comm = CommModel::sequential;
    SimResult r = simulate_schedule(ScheduleKind::one_f_one_b, 2, 2, 1, opt);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("deadlock"), std::string::npos) << r.error;
    // GPipe has no such exchange.
    EXPECT_TRUE(simulate_schedule(ScheduleKind::simple, 4, 8, 1, opt).ok);
}

TEST(PipelineSim, ReportsMismatchedMessages) {
    // Rank 0 sends micro 1 first, rank 1 expects micro 0 first.
    std::vector<std::vector<Action>> lists = {
        {{ActionKind::forward, 0, 0}, {ActionKind::forward, 1, 0},
         {ActionKind::send_act, 1, 0}, {ActionKind::send_act, 0, 0}},
        {{ActionKind::recv_act, 0, 0}, {ActionKind::forward, 0, 0}}};
    SimResult r = simulate_pipeline(lists, 2, 2, 1);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("mismatch"), std::string::npos) << r.error;
}

TEST(PipelineSim, ReportsMissingReceiveAndDoubleForward) {
    // Forward on stage 1 without receiving its activation.
    std::vector<std::vector<Action>> lists = {
        {{ActionKind::forward, 0, 0}, {ActionKind::send_act, 0, 0},
         {ActionKind::recv_grad, 0, 0}, {ActionKind::backward, 0, 0}},
        {{ActionKind::forward, 0, 0}, {ActionKind::backward, 0, 0},
         {ActionKind::send_grad, 0, 0}}};
    SimResult r = simulate_pipeline(lists, 2, 1, 1);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("before its activation arrived"), std::string::npos) << r.error;

    std::vector<std::vector<Action>> twice = {
        {{ActionKind::forward, 0, 0}, {ActionKind::forward, 0, 0}, {ActionKind::backward, 0, 0}}};
    r = simulate_pipeline(twice, 1, 1, 1);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("forwarded twice"), std::string::npos) << r.error;
}
