// CommMpi under mpirun (ctest runs this binary with -np 2 and -np 4): the same
// collective checks as CommLocal, topology groups, fixed-order sums, and the
// error paths that can be tested without ending the job. The abort-on-timeout
// path ends the job by design, so it runs as its own scenario
// (`--scenario=skip-collective`, driven by timeout_abort.sh).
//
// Every rank runs every test; rank 0 prints the usual gtest report, the other
// ranks print only their failures, prefixed with their rank. The exit status
// is non-zero if any rank failed (mpirun reports the first failing rank).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "comm/comm_mpi.h"
#include "core/check.h"
#include "core/runtime.h"
#include "parallel/comm_checks.h"

using namespace loom;
using namespace loom::testing;

namespace {

CommOptions test_options() {
    CommOptions o;
    o.timeout_s = 60;  // a broken test fails in a minute, never hangs ctest
    return o;
}

class MpiTest : public ::testing::Test {
protected:
    void SetUp() override { world = comm_mpi_world(test_options()); }
    void TearDown() override {
        world->barrier()->wait();  // keep ranks in step between tests
        world.reset();
    }
    std::unique_ptr<Communicator> world;
};

// Prints failures from ranks other than 0, prefixed with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
public:
    explicit RankFailurePrinter(int rank) : rank_(rank) {}
    void OnTestPartResult(const ::testing::TestPartResult& r) override {
        if (!r.failed()) return;
        std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                     r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
    }

private:
    int rank_;
};

}  // namespace

TEST_F(MpiTest, CollectivesMatchExpectedValues) { check_all(*world); }

TEST_F(MpiTest, FixedOrderSumsAreBitwiseSequential) {
    CommOptions o = test_options();
    o.fixed_order_reduction = true;
    auto fixed = comm_mpi_world(o);
    check_fixed_order(*fixed);
    // Every collective still gives the right values in fixed-order mode.
    check_all_reduce(*fixed);
    check_reduce_scatter(*fixed);
}

// The all-to-all reduce-scatter (comm_mpi.cpp) sums in rank order without
// being asked: ZeRO's gradient shards are bitwise CommLocal's, run after run.
TEST_F(MpiTest, ReduceScatterSumsInRankOrderByDefault) {
    check_reduce_scatter_rank_order(*world);
}

TEST_F(MpiTest, TopologyGroups) {
    const int n = world->size();
    std::vector<TopologyConfig> cfgs;
    if (n == 2) cfgs = {{2, 1, 1, 1, "tp-dp-pp"}, {1, 2, 1, 1, "tp-dp-pp"}, {1, 1, 2, 1, "tp-dp-pp"}};
    if (n == 4)
        cfgs = {{2, 2, 1, 1, "tp-dp-pp"}, {1, 2, 2, 1, "tp-pp-dp"}, {2, 1, 2, 1, "dp-tp-pp"},
                {1, 4, 1, 1, "tp-dp-pp"}, {4, 1, 1, 1, "tp-dp-pp"}};
    if (cfgs.empty()) cfgs = {{n, 1, 1, 1, "tp-dp-pp"}, {1, n, 1, 1, "tp-dp-pp"}};
    for (const auto& cfg : cfgs) check_groups(*world, cfg);
}

TEST_F(MpiTest, SplitRejectsInconsistentLists) {
    // Rank 0 claims {0, 1}; everyone else forms singletons. Rank 0's group then
    // has fewer members than its list and it must say so.
    std::vector<int> mine = world->rank() == 0 ? std::vector<int>{0, 1} : std::vector<int>{world->rank()};
    if (world->rank() == 0) {
        try {
            world->split(mine, "bad");
            ADD_FAILURE() << "expected an error";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("members must pass identical lists"),
                      std::string::npos)
                << e.what();
        }
    } else {
        EXPECT_NO_THROW(world->split(mine, "bad"));
    }
}

TEST_F(MpiTest, RecvTimeoutThrowsWithTheCall) {
    CommOptions o = test_options();
    o.timeout_s = 0.5;
    o.on_timeout = TimeoutAction::throw_error;
    auto quick = comm_mpi_world(o);  // its own context: the cancelled receive stays private
    if (quick->rank() == 0) {
        int64_t x = -1;
        auto start = std::chrono::steady_clock::now();
        try {
            quick->recv(&x, 1, DType::i64, 1, 7)->wait();
            ADD_FAILURE() << "expected a timeout";
        } catch (const Error& e) {
            std::string msg = e.what();
            EXPECT_NE(msg.find("rank 0 (world rank 0) timed out"), std::string::npos) << msg;
            EXPECT_NE(msg.find("recv(from 1, tag 7, 1 x i64)"), std::string::npos) << msg;
            EXPECT_NE(msg.find("group 'world'"), std::string::npos) << msg;
        }
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        EXPECT_LT(secs, 10.0);
        EXPECT_EQ(x, -1);
    }
}

TEST_F(MpiTest, ShortMessageIsAnError) {
    if (world->size() < 2 || world->rank() > 1) return;
    std::vector<float> buf(8, 1.0f);
    if (world->rank() == 0) {
        world->send(buf.data(), 4, DType::f32, 1, 2)->wait();
    } else {
        try {
            world->recv(buf.data(), 8, DType::f32, 0, 2)->wait();
            ADD_FAILURE() << "expected an error";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("the message held 4 elements, expected 8"),
                      std::string::npos)
                << e.what();
        }
    }
}

TEST_F(MpiTest, NonblockingOverlap) {
    // Several collectives in flight at once on different communicators.
    auto second = world->split([&] {
        std::vector<int> all(static_cast<size_t>(world->size()));
        for (int r = 0; r < world->size(); ++r) all[size_t(r)] = r;
        return all;
    }(), "copy");
    ASSERT_NE(second, nullptr);
    std::vector<double> a(50000, 1.0), b(50000, 2.0);
    auto wa = world->all_reduce(std::span<double>(a), ReduceOp::sum);
    auto wb = second->all_reduce(std::span<double>(b), ReduceOp::max);
    wb->wait();
    wa->wait();
    EXPECT_EQ(a[49999], double(world->size()));
    EXPECT_EQ(b[0], 2.0);
}

// The abort path: rank 1 skips an all_reduce; rank 0 must report it and end
// the job within the timeout instead of hanging.
static int run_skip_collective_scenario() {
    CommOptions o;
    o.timeout_s = 2.0;  // on_timeout = abort (the default)
    auto world = comm_mpi_world(o);
    if (world->rank() != 1) {
        std::vector<float> buf(1024, 1.0f);
        world->all_reduce(std::span<float>(buf), ReduceOp::sum)->wait();
        std::fprintf(stderr, "rank %d: all_reduce returned although rank 1 skipped it\n",
                     world->rank());
        return 1;
    }
    // Rank 1 moves on and waits elsewhere (a long barrier on another group).
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 1;
}

int main(int argc, char** argv) {
    runtime_init();
    MpiSession mpi;
    for (int i = 1; i < argc; ++i)
        if (std::strcmp(argv[i], "--scenario=skip-collective") == 0) return run_skip_collective_scenario();
    ::testing::InitGoogleTest(&argc, argv);
    if (mpi.world_rank() != 0) {
        auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
        delete listeners.Release(listeners.default_result_printer());
        listeners.Append(new RankFailurePrinter(mpi.world_rank()));
    }
    return RUN_ALL_TESTS();
}
