// Every data-parallel layout trains the same model: BERT masked LM and GPT-2
// causal LM (tiny HF fixtures, random batches, dropout on) under dp 1, 2, 3, 4
// with ZeRO none / 1 / 2 give the per-step losses of the single-process run
// (relative 1e-6) and its final parameters, over 20 AdamW steps with clipping;
// gradient accumulation 4 x dp 1 = 2 x dp 2 = 1 x dp 4. Ranks are CommLocal
// threads (one Model each, one OpenMP thread each). The mpirun version of a
// few of these configurations is tests/parallel/mpi_dp/.
//
// Why not bitwise: the global gradient is the same sum grouped differently
// (per rank, then across ranks; micro-batches of different sizes run GEMMs of
// different shapes), so layouts agree to float rounding, which 20 AdamW steps
// keep at the 1e-6 level. Replicas of one run must agree bitwise.
#include <gtest/gtest.h>

#include <cmath>

#include "comm/comm_local.h"
#include "dp_test_driver.h"

namespace loom::test {
namespace {

std::string fixture(const std::string& name) {
    return std::string(LOOM_TEST_DATA_DIR) + "/hf/" + name;
}

// Runs the layout on CommLocal threads; returns rank 0's run after checking
// that every replica ends with bitwise the same parameters and losses.
DpRun run_local(const DpJob& job, const DpLayout& layout) {
    std::vector<DpRun> runs(size_t(layout.dp));
    comm_local_run(layout.dp, [&](Communicator& world) {
        omp_set_num_threads(1);  // ranks are the parallelism here
        runs[size_t(world.rank())] = run_dp_job(job, layout, world);
    });
    for (int r = 1; r < layout.dp; ++r) {
        EXPECT_EQ(runs[size_t(r)].losses, runs[0].losses) << "rank " << r;
        EXPECT_TRUE(runs[size_t(r)].params == runs[0].params)
            << "rank " << r << " holds different parameters than rank 0";
    }
    return runs[0];
}

std::string layout_name(const DpLayout& l) {
    return "dp" + std::to_string(l.dp) + "_ga" + std::to_string(l.ga) + "_" +
           std::string(zero_stage_name(l.zero));
}

class DpEquivalence : public ::testing::TestWithParam<std::string> {
  protected:
    DpJob job() const {
        DpJob j;
        j.fixture_dir = fixture(GetParam());
        return j;
    }
};

TEST_P(DpEquivalence, DpSizesAndZeroStagesMatchOneProcess) {
    const DpJob j = job();
    const DpRun ref = run_local(j, {1, 1, ZeroStage::none});
    // The reference must be a real training run: the loss moves, clipping is hit.
    ASSERT_EQ(ref.losses.size(), size_t(j.steps));
    EXPECT_LT(ref.losses.back(), ref.losses.front());
    int clipped = 0;
    for (double n : ref.grad_norms) clipped += n > j.max_grad_norm;
    EXPECT_GT(clipped, 0) << "no step was clipped: the clipping path is untested";

    for (ZeroStage z : {ZeroStage::none, ZeroStage::optimizer, ZeroStage::gradients}) {
        for (int dp : {1, 2, 3, 4}) {
            if (dp == 1 && z == ZeroStage::none) continue;
            const DpLayout l{dp, 1, z};
            const DpRun run = run_local(j, l);
            expect_same_training(run, ref, GetParam() + " " + layout_name(l), j);
            if (dp > 1) {
                EXPECT_GT(run.launched_by_hook, 0)
                    << layout_name(l) << ": no bucket was reduced while backward ran";
                EXPECT_GT(run.sparse_rows, 0)
                    << layout_name(l) << ": the embedding rows were not kept sparse";
            }
        }
    }
}

// The same for LAMB and SGD, replicated and sharded: LAMB's per-tensor
// norms are summed over the shards before its trust ratios are taken.
TEST_P(DpEquivalence, LambAndSgdUnderEveryZeroStageMatchOneProcess) {
    for (OptimizerKind k : {OptimizerKind::lamb, OptimizerKind::sgd}) {
        DpJob j = job();
        j.optim = k;
        j.steps = 8;
        if (k == OptimizerKind::sgd) j.lr = 0.5;  // without moments it needs a larger step
        const std::string name = GetParam() + (k == OptimizerKind::lamb ? " lamb " : " sgd ");
        const DpRun ref = run_local(j, {1, 1, ZeroStage::none});
        ASSERT_EQ(ref.losses.size(), size_t(j.steps));
        EXPECT_LT(ref.losses.back(), ref.losses.front()) << name << "did not learn";
        for (ZeroStage z : {ZeroStage::none, ZeroStage::optimizer, ZeroStage::gradients}) {
            const DpLayout l{3, 1, z};
            expect_same_training(run_local(j, l), ref, name + layout_name(l), j);
        }
    }
}

TEST_P(DpEquivalence, AccumulationEqualsLargerDp) {
    const DpJob j = job();
    for (ZeroStage z : {ZeroStage::none, ZeroStage::optimizer, ZeroStage::gradients}) {
        const DpRun a = run_local(j, {1, 4, z});
        const DpRun b = run_local(j, {2, 2, z});
        const DpRun c = run_local(j, {4, 1, z});
        const std::string n(zero_stage_name(z));
        expect_same_training(b, a, GetParam() + " ga2 x dp2 vs ga4 x dp1 " + n, j);
        expect_same_training(c, a, GetParam() + " ga1 x dp4 vs ga4 x dp1 " + n, j);
    }
}

TEST_P(DpEquivalence, OverlapAndBucketSizeDoNotChangeResults) {
    // Reductions are elementwise: where buckets start and when they launch
    // cannot change a single bit. (Without clipping: under ZeRO the norm's
    // partial sums follow the shard layout, which the bucket plan changes.)
    DpJob j = job();
    j.steps = 4;
    j.max_grad_norm = 0;
    const DpRun a = run_local(j, {2, 2, ZeroStage::optimizer, 0.05, true});
    const DpRun b = run_local(j, {2, 2, ZeroStage::optimizer, 25.0, false});
    const DpRun c = run_local(j, {2, 2, ZeroStage::none, 0.01, true});
    const DpRun d = run_local(j, {2, 2, ZeroStage::none, 25.0, false});
    EXPECT_EQ(a.losses, b.losses);
    EXPECT_TRUE(a.params == b.params) << "ZeRO-1 parameters depend on the bucket plan";
    EXPECT_EQ(c.losses, d.losses);
    EXPECT_TRUE(c.params == d.params) << "DDP parameters depend on the bucket plan";
    EXPECT_EQ(b.launched_by_hook, 0);
    EXPECT_GT(a.launched_by_hook, 0);
}

TEST_P(DpEquivalence, SparseEmbeddingRowsTrainAsTheDenseTable) {
    // The word table's gradient as dense range + exchanged rows, against the
    // whole table reduced densely: the same sums grouped differently.
    const DpJob j = job();
    for (ZeroStage z : {ZeroStage::none, ZeroStage::optimizer, ZeroStage::gradients}) {
        DpLayout dense{2, 2, z};
        dense.sparse_embedding_grad = false;
        const DpRun a = run_local(j, dense);
        const DpRun b = run_local(j, {2, 2, z});
        EXPECT_EQ(a.sparse_rows, 0);
        EXPECT_GT(b.sparse_rows, 0);
        expect_same_training(b, a, GetParam() + " sparse vs dense rows " + layout_name(dense), j);
    }
}

TEST_P(DpEquivalence, CheckpointResumesUnderAnotherLayout) {
    // 10 steps as ZeRO-1 on 2 ranks; the optimizer state gathered into global
    // tensors by name; then 10 more as ZeRO-2 on 3 ranks and as plain DDP on
    // 4: both must continue the uninterrupted single-process run.
    DpJob j = job();
    const DpRun whole = run_local(j, {1, 1, ZeroStage::none});
    j.steps = 10;
    j.gather_state = true;
    const DpRun first = run_local(j, {2, 1, ZeroStage::optimizer});
    ASSERT_FALSE(first.optimizer_state.empty());
    j.start_params = &first.params;
    j.start_state = &first.optimizer_state;
    j.first_step = 10;
    for (const DpLayout& l :
         {DpLayout{3, 1, ZeroStage::gradients}, DpLayout{4, 1, ZeroStage::none}}) {
        DpRun second = run_local(j, l);
        // Stitch the two halves into one 20-step run for the comparison.
        DpRun stitched = second;
        stitched.losses.insert(stitched.losses.begin(), first.losses.begin(), first.losses.end());
        stitched.grad_norms.insert(stitched.grad_norms.begin(), first.grad_norms.begin(),
                                   first.grad_norms.end());
        DpJob full = job();
        expect_same_training(stitched, whole, GetParam() + " resumed as " + layout_name(l), full);
    }
}

INSTANTIATE_TEST_SUITE_P(Models, DpEquivalence, ::testing::Values("bert-mlm", "gpt2-lm"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                             std::string s = p.param;
                             for (char& ch : s)
                                 if (ch == '-') ch = '_';
                             return s;
                         });

}  // namespace
}  // namespace loom::test
