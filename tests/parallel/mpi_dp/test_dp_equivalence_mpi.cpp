// Data parallelism under real mpirun (ctest runs this with -np 2 and -np 4,
// oversubscribed): CommMpi bucketed all-reduce / reduce-scatter / all-gather
// must train the tiny BERT masked LM and GPT-2 causal LM exactly like one
// process. Every rank also runs the single-process reference itself (a
// one-rank CommLocal group), so nothing is shared but the data recipe.
// Checks: per-step losses within relative 1e-6 and final parameters within
// the tolerance of tests/parallel/test_dp_equivalence.cpp, replicas bitwise
// identical (rank 0's parameters broadcast and compared), and buckets
// launched while backward ran.
//
// Rank 0 prints the gtest report; other ranks print only their failures.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "comm/comm_local.h"
#include "comm/comm_mpi.h"
#include "core/runtime.h"
#include "dp_test_driver.h"

using namespace loom;
using namespace loom::test;

namespace {

CommOptions test_options() {
    CommOptions o;
    o.timeout_s = 120;  // a broken test fails in minutes, never hangs ctest
    return o;
}

struct Config {
    std::string model;
    int ga;
    ZeroStage zero;
};

class DpMpi : public ::testing::TestWithParam<Config> {
protected:
    void SetUp() override { world = comm_mpi_world(test_options()); }
    void TearDown() override {
        world->barrier()->wait();
        world.reset();
    }
    std::unique_ptr<Communicator> world;
};

TEST_P(DpMpi, MatchesOneProcess) {
    const Config& cfg = GetParam();
    DpJob job;
    job.fixture_dir = std::string(LOOM_TEST_DATA_DIR) + "/hf/" + cfg.model;
    job.G = 8;
    const int dp = world->size();
    ASSERT_EQ(job.G % (dp * cfg.ga), 0) << "run with -np 1, 2 or 4";
    omp_set_num_threads(1);

    auto solo = comm_local_create(1);
    const DpRun ref = run_dp_job(job, {1, 1, ZeroStage::none}, *solo[0]);
    const DpRun run = run_dp_job(job, {dp, cfg.ga, cfg.zero}, *world);
    const std::string what = cfg.model + " dp" + std::to_string(dp) + " ga" +
                             std::to_string(cfg.ga) + " " + std::string(zero_stage_name(cfg.zero));
    expect_same_training(run, ref, what, job);
    if (dp > 1) {
        EXPECT_GT(run.launched_by_hook, 0) << what;
    }

    std::vector<float> p0 = run.params;
    world->broadcast(p0.data(), int64_t(p0.size()), DType::f32, 0)->wait();
    EXPECT_TRUE(p0 == run.params) << what << ": rank " << world->rank()
                                  << " parameters differ from rank 0's";
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, DpMpi,
    ::testing::Values(Config{"bert-mlm", 1, ZeroStage::none}, Config{"bert-mlm", 2, ZeroStage::optimizer},
                      Config{"bert-mlm", 1, ZeroStage::gradients},
                      Config{"gpt2-lm", 2, ZeroStage::none}, Config{"gpt2-lm", 1, ZeroStage::optimizer},
                      Config{"gpt2-lm", 2, ZeroStage::gradients}),
    [](const ::testing::TestParamInfo<Config>& p) {
        std::string s = p.param.model + "_ga" + std::to_string(p.param.ga) + "_" +
                        std::string(zero_stage_name(p.param.zero));
        for (char& ch : s)
            if (ch == '-') ch = '_';
        return s;
    });

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

int main(int argc, char** argv) {
    runtime_init();
    MpiSession mpi;
    ::testing::InitGoogleTest(&argc, argv);
    if (mpi.world_rank() != 0) {
        auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
        delete listeners.Release(listeners.default_result_printer());
        listeners.Append(new RankFailurePrinter(mpi.world_rank()));
    }
    return RUN_ALL_TESTS();
}
