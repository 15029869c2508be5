// CommLocal: the shared collective checks on 1..4 thread ranks, topology
// groups, and the failure paths (timeout, mismatched calls, a failing rank).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "comm/comm_local.h"
#include "core/check.h"
#include "core/dtype.h"
#include "parallel/comm_checks.h"

using namespace loom;
using namespace loom::testing;

namespace {

CommOptions quick(double timeout_s) {
    CommOptions o;
    o.timeout_s = timeout_s;
    o.on_timeout = TimeoutAction::throw_error;
    return o;
}

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

class CommLocalRanks : public ::testing::TestWithParam<int> {};

TEST_P(CommLocalRanks, CollectivesMatchExpectedValues) {
    comm_local_run(GetParam(), [](Communicator& c) { check_all(c); }, quick(60));
}

TEST_P(CommLocalRanks, SumsInRankOrder) {
    comm_local_run(GetParam(), [](Communicator& c) { check_fixed_order(c); }, quick(60));
}

INSTANTIATE_TEST_SUITE_P(Sizes, CommLocalRanks, ::testing::Values(1, 2, 3, 4));

TEST(CommLocal, TopologyGroups) {
    const TopologyConfig cfgs[] = {{2, 2, 2, 1, "tp-dp-pp"}, {1, 4, 2, 1, "tp-pp-dp"},
                                   {2, 1, 4, 1, "dp-tp-pp"}, {1, 8, 1, 1, "tp-dp-pp"},
                                   {8, 1, 1, 1, "tp-dp-pp"}};
    for (const auto& cfg : cfgs)
        comm_local_run(8, [&](Communicator& c) { check_groups(c, cfg); }, quick(60));
}

TEST(CommLocal, CollectivesOnSubgroupsRunConcurrently) {
    // dp and tp groups used in an interleaved order on different ranks' groups.
    comm_local_run(4, [](Communicator& world) {
        Topology topo({2, 1, 2, 1, "tp-dp-pp"}, 4, world.rank());
        ProcessGroups g = process_groups_create(world, topo);
        for (int iter = 0; iter < 50; ++iter) {
            float a = float(world.rank()), b = float(world.rank());
            auto wa = g.dp->all_reduce(std::span<float>(&a, 1), ReduceOp::sum);
            auto wb = g.tp->all_reduce(std::span<float>(&b, 1), ReduceOp::max);
            wb->wait();
            wa->wait();
            auto dp = topo.group_ranks({Axis::dp});
            auto tp = topo.group_ranks({Axis::tp});
            EXPECT_EQ(a, float(dp[0] + dp[1]));
            EXPECT_EQ(b, float(std::max(tp[0], tp[1])));
        }
    }, quick(60));
}

TEST(CommLocal, TimeoutNamesRankCollectiveAndGroup) {
    auto start = std::chrono::steady_clock::now();
    std::string msg = error_of([] {
        comm_local_run(2, [](Communicator& c) {
            if (c.rank() == 1) return;  // rank 1 skips the collective
            std::vector<float> buf(16, 1.0f);
            c.all_reduce(std::span<float>(buf), ReduceOp::sum)->wait();
        }, quick(0.5));
    });
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("timed out"), std::string::npos) << msg;
    EXPECT_NE(msg.find("all_reduce(sum, 16 x f32)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("group 'world'"), std::string::npos) << msg;
    EXPECT_LT(secs, 10.0);
    EXPECT_GE(secs, 0.5);
}

TEST(CommLocal, TimeoutOnARecvThatNeverComes) {
    std::string msg = error_of([] {
        comm_local_run(2, [](Communicator& c) {
            if (c.rank() == 1) return;
            int64_t x = 0;
            c.recv(&x, 1, DType::i64, 1, 5)->wait();
        }, quick(0.3));
    });
    EXPECT_NE(msg.find("recv(from 1, tag 5, 1 x i64)"), std::string::npos) << msg;
}

TEST(CommLocal, MismatchedCollectivesFailOnEveryRank) {
    std::atomic<int> failures{0};
    std::string msg = error_of([&] {
        comm_local_run(2, [&](Communicator& c) {
            std::vector<float> buf(8, 1.0f);
            try {
                if (c.rank() == 0)
                    c.all_reduce(std::span<float>(buf), ReduceOp::sum)->wait();
                else
                    c.broadcast(std::span<float>(buf), 0)->wait();
            } catch (const Error&) {
                ++failures;
                throw;
            }
        }, quick(30));
    });
    EXPECT_EQ(failures.load(), 2);
    EXPECT_NE(msg.find("collective mismatch"), std::string::npos) << msg;
    EXPECT_NE(msg.find("broadcast(root 0, 8 x f32)"), std::string::npos) << msg;
}

TEST(CommLocal, MessageSizeMismatchIsAnError) {
    std::string msg = error_of([] {
        comm_local_run(2, [](Communicator& c) {
            std::vector<float> buf(8);
            if (c.rank() == 0)
                c.send(buf.data(), 8, DType::f32, 1)->wait();
            else
                c.recv(buf.data(), 4, DType::f32, 0)->wait();
        }, quick(30));
    });
    EXPECT_NE(msg.find("sent 8 x f32, receive expects 4 x f32"), std::string::npos) << msg;
}

TEST(CommLocal, FailingRankReleasesPeersAtOnce) {
    auto start = std::chrono::steady_clock::now();
    std::string msg = error_of([] {
        comm_local_run(3, [](Communicator& c) {
            if (c.rank() == 2) throw Error("data file missing");
            c.barrier()->wait();  // would wait out the 60 s timeout otherwise
        }, quick(60));
    });
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(msg, "rank 2: data file missing");
    EXPECT_LT(secs, 5.0);
}

TEST(CommLocal, SplitChecksMemberLists) {
    std::string msg = error_of([] {
        comm_local_run(3, [](Communicator& c) {
            // rank 0 thinks {0, 1} is a group, rank 1 thinks {1, 2}.
            std::vector<int> mine = c.rank() == 0 ? std::vector<int>{0, 1} : std::vector<int>{1, 2};
            c.split(mine, "bad");
        }, quick(30));
    });
    EXPECT_NE(msg.find("split"), std::string::npos) << msg;
    EXPECT_NE(msg.find("lists"), std::string::npos) << msg;
}

// bf16 and f16 (a staged backend's narrow gradients): summed and maxed by
// value, each partial sum rounded to the type.
TEST(CommLocal, ReducesBf16AndF16) {
    for (DType t : {DType::bf16, DType::f16}) {
        const auto to = [t](float x) { return t == DType::bf16 ? f32_to_bf16(x) : f32_to_f16(x); };
        const auto from = [t](uint16_t h) {
            return t == DType::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
        };
        std::vector<std::vector<float>> got(3);
        comm_local_run(3, [&](Communicator& c) {
            const float r = float(c.rank());
            std::vector<uint16_t> sum = {to(0.25f * r), to(-1.5f), to(100.0f + r)};
            std::vector<uint16_t> mx = sum;
            c.all_reduce(sum.data(), 3, t, ReduceOp::sum)->wait();
            c.all_reduce(mx.data(), 3, t, ReduceOp::max)->wait();
            for (uint16_t h : sum) got[size_t(c.rank())].push_back(from(h));
            for (uint16_t h : mx) got[size_t(c.rank())].push_back(from(h));
        });
        for (const auto& g : got) {
            // 0 + 0.25 + 0.5; -4.5; 100 + 101 + 102 (303 is exact in both types
            // only to their precision: bf16 keeps 8 bits, so 303 -> 304).
            const float third = t == DType::bf16 ? 304.0f : 303.0f;
            EXPECT_EQ(g, (std::vector<float>{0.75f, -4.5f, third, 0.5f, -1.5f, 102.0f}))
                << dtype_name(t);
        }
    }
}

TEST(CommLocal, ArgumentErrorsNameTheCall) {
    auto comms = comm_local_create(2);
    std::vector<float> buf(4);
    EXPECT_NE(error_of([&] { comms[0]->send(buf.data(), 4, DType::f32, 2); }).find("peer 2 outside"),
              std::string::npos);
    std::vector<int64_t> ints(4);
    EXPECT_NE(error_of([&] { comms[0]->all_reduce(ints.data(), 4, DType::i64, ReduceOp::avg); })
                  .find("avg needs a floating-point buffer"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                  comms[0]->all_reduce(buf.data(), 4, DType::u8, ReduceOp::sum);
              }).find("dtype u8 is not supported"),
              std::string::npos);
    EXPECT_NE(error_of([&] { comms[0]->group_end(); }).find("without group_start"), std::string::npos);
}

TEST(CommLocalDeathTest, TimeoutAbortsByDefault) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            CommOptions o;
            o.timeout_s = 0.2;  // on_timeout defaults to abort
            comm_local_run(2, [](Communicator& c) {
                if (c.rank() == 0) c.barrier()->wait();
            }, o);
        },
        "rank 0 \\(world rank 0\\) timed out after 0\\.[0-9] s waiting in barrier on group "
        "'world'");
}
