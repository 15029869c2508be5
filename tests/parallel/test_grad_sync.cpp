// GradSync: the bucket plan and shard pieces (pure logic), then bucketed
// reductions on CommLocal threads with gradients whose sums are exact in
// float (small multiples of 1/64), so every mode can be checked bitwise:
// all-reduce, ZeRO-1 reduce-scatter, ZeRO-2 per-micro-batch accumulation,
// launches driven by grad-ready reports, and the misuse errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "comm/comm_local.h"
#include "core/check.h"
#include "parallel/grad_sync.h"

namespace loom {
namespace {

// A grouped table (LoRA): the buckets, and so the ZeRO shards, tile only
// the trainable span [first, flat); the frozen base below it is never reduced.
TEST(GradBucketsPlan, FromFirstCoverOnlyTheTrainableSpan) {
    for (int dp : {1, 2, 3}) {
        const auto bk = grad_buckets_plan(10000, 1000, dp, 9000);
        ASSERT_FALSE(bk.empty());
        EXPECT_EQ(bk.front().end, 10000);
        EXPECT_EQ(bk.back().begin, 9000);
        int64_t covered = 0;
        for (const GradBucket& b : bk) covered += b.numel();
        EXPECT_EQ(covered, 1000);
        EXPECT_LE(shard_numel(bk), 1000 / dp + 16 * int64_t(bk.size())) << "dp " << dp;
    }
    EXPECT_TRUE(grad_buckets_plan(100, 64, 2, 100).empty());
    EXPECT_THROW(grad_buckets_plan(100, 64, 2, 101), Error);
}

TEST(GradBucketsPlan, TileTheBufferTopDownInEqualChunks) {
    for (int64_t flat : {0, 1, 15, 16, 1000, 4096, 100003}) {
        for (int64_t want : {1, 64, 1000, 1 << 20}) {
            for (int dp : {1, 2, 3, 4, 7}) {
                const auto bk = grad_buckets_plan(flat, want, dp);
                const std::string ctx = "flat " + std::to_string(flat) + " bucket " +
                                        std::to_string(want) + " dp " + std::to_string(dp);
                int64_t expect_end = flat;
                for (size_t b = 0; b < bk.size(); ++b) {
                    const GradBucket& k = bk[b];
                    EXPECT_EQ(k.end, expect_end) << ctx;  // contiguous, top down
                    EXPECT_GT(k.numel(), 0) << ctx;
                    EXPECT_EQ(k.chunk % 16, 0) << ctx;
                    EXPECT_GE(k.chunk * dp, k.numel()) << ctx;
                    EXPECT_LT((k.chunk - 16) * dp, k.numel())
                        << ctx << ": chunk larger than needed";
                    if (b + 1 < bk.size()) {
                        EXPECT_FALSE(k.padded(dp)) << ctx << ": only the bottom bucket is padded";
                        EXPECT_GE(k.numel(), want) << ctx;
                    }
                    expect_end = k.begin;
                }
                EXPECT_EQ(expect_end, 0) << ctx;
                // Every element belongs to exactly one rank's piece.
                std::vector<int> owner(size_t(flat), 0);
                for (int r = 0; r < dp; ++r) {
                    const auto pieces = shard_pieces(bk, r);
                    ASSERT_EQ(pieces.size(), bk.size());
                    int64_t at = 0;
                    for (size_t b = 0; b < bk.size(); ++b) {
                        EXPECT_EQ(pieces[b].shard_begin, at) << ctx;
                        EXPECT_LE(pieces[b].flat_end - pieces[b].flat_begin, pieces[b].chunk);
                        at += pieces[b].chunk;
                        for (int64_t i = pieces[b].flat_begin; i < pieces[b].flat_end; ++i)
                            ++owner[size_t(i)];
                    }
                    EXPECT_EQ(at, shard_numel(bk)) << ctx;
                }
                EXPECT_TRUE(std::all_of(owner.begin(), owner.end(), [](int o) { return o == 1; }))
                    << ctx;
            }
        }
    }
}

TEST(GradBucketsPlan, BucketSizeFromMegabytes) {
    EXPECT_EQ(bucket_elems_from_mb(25.0), 25 << 18);
    EXPECT_EQ(bucket_elems_from_mb(1e-9), 1);
    EXPECT_THROW(bucket_elems_from_mb(0.0), Error);
}

// Gradient of rank r, micro-batch k, element i: a small multiple of 1/64, so
// sums over ranks and micro-batches are exact in float in any order.
float grad_value(int r, int k, int64_t i) {
    return float(int((i * 7 + r * 13 + k * 5) % 17) - 8) / 64.0f;
}

constexpr int64_t k_flat = 1001;  // odd: the bottom bucket is padded
constexpr int64_t k_bucket = 100;

GradSyncOptions options(ZeroStage z, bool overlap = true) {
    GradSyncOptions o;
    o.zero = z;
    o.bucket_elems = k_bucket;
    o.overlap = overlap;
    return o;
}

// Reports [0, flat) final in uneven pieces from the top down, as a model does,
// checking after each report that exactly the fully reported buckets launched.
void report_top_down(GradSync& s, int64_t flat, bool overlap = true) {
    const int64_t base = s.stats().launched_by_hook;
    int64_t hi = flat;
    int64_t step = 37;
    while (hi > 0) {
        const int64_t lo = std::max<int64_t>(0, hi - step);
        s.grads_ready(lo, hi);
        int64_t complete = 0;
        for (const GradBucket& b : s.buckets()) complete += b.begin >= lo;
        EXPECT_EQ(s.stats().launched_by_hook - base, overlap ? complete : 0)
            << "after reporting [" << lo << ", " << flat << ")";
        hi = lo;
        step = step * 3 % 101 + 1;
    }
}

TEST(GradSync, AllReduceSumsEveryElementAndLaunchesFromTheHook) {
    const int dp = 3;
    comm_local_run(dp, [&](Communicator& world) {
        const int r = world.rank();
        std::vector<float> g(k_flat);
        GradSync s(g.data(), k_flat, world, options(ZeroStage::none));
        for (int step = 0; step < 2; ++step) {  // the second step reuses every buffer
            s.begin_step();
            for (int64_t i = 0; i < k_flat; ++i) g[size_t(i)] = grad_value(r, step, i);
            s.begin_micro_batch(true);
            report_top_down(s, k_flat);
            s.end_micro_batch();
            EXPECT_EQ(s.stats().launched_at_end, 0);
            s.finalize(0.5);
            for (int64_t i = 0; i < k_flat; ++i) {
                float want = 0;
                for (int q = 0; q < dp; ++q) want += grad_value(q, step, i);
                ASSERT_EQ(g[size_t(i)], want * 0.5f) << "rank " << r << " element " << i;
            }
        }
    });
}

TEST(GradSync, AccumulationReducesOnlyOnTheLastMicroBatch) {
    comm_local_run(2, [&](Communicator& world) {
        const int r = world.rank();
        std::vector<float> g(k_flat, 0.0f);
        GradSync s(g.data(), k_flat, world, options(ZeroStage::none));
        s.begin_step();
        for (int k = 0; k < 3; ++k) {
            for (int64_t i = 0; i < k_flat; ++i) g[size_t(i)] += grad_value(r, k, i);
            s.begin_micro_batch(k == 2);
            s.grads_ready(0, k_flat);
            if (k < 2) {
                EXPECT_EQ(s.stats().launched_by_hook, 0) << "micro-batch " << k;
            }
            s.end_micro_batch();
        }
        EXPECT_EQ(s.stats().launched_by_hook, int64_t(s.buckets().size()));
        s.finalize();
        for (int64_t i = 0; i < k_flat; ++i) {
            float want = 0;
            for (int q = 0; q < 2; ++q)
                for (int k = 0; k < 3; ++k) want += grad_value(q, k, i);
            ASSERT_EQ(g[size_t(i)], want) << "element " << i;
        }
    });
}

TEST(GradSync, ZeroOneLeavesEachRankItsSummedChunks) {
    for (int dp : {1, 2, 4}) {
        for (bool overlap : {true, false}) {
            comm_local_run(dp, [&](Communicator& world) {
                const int r = world.rank();
                std::vector<float> g(k_flat);
                GradSync s(g.data(), k_flat, world, options(ZeroStage::optimizer, overlap));
                s.begin_step();
                for (int64_t i = 0; i < k_flat; ++i) g[size_t(i)] = grad_value(r, 0, i);
                s.begin_micro_batch(true);
                report_top_down(s, k_flat, overlap);
                s.end_micro_batch();
                s.finalize();
                if (!overlap) {
                    EXPECT_EQ(s.stats().launched_by_hook, 0);
                }
                for (const ShardPiece& p : s.pieces()) {
                    for (int64_t i = p.flat_begin; i < p.flat_end; ++i) {
                        float want = 0;
                        for (int q = 0; q < dp; ++q) want += grad_value(q, 0, i);
                        ASSERT_EQ(s.shard_grads().as<float>()[p.shard_begin + i - p.flat_begin],
                                  want)
                            << "dp " << dp << " rank " << r << " element " << i;
                    }
                    for (int64_t j = p.flat_end - p.flat_begin; j < p.chunk; ++j)
                        ASSERT_EQ(s.shard_grads().as<float>()[p.shard_begin + j], 0.0f)
                            << "padding";
                }
            });
        }
    }
}

TEST(GradSync, ZeroTwoAccumulatesShardsAcrossMicroBatches) {
    const int dp = 3, ga = 3;
    comm_local_run(dp, [&](Communicator& world) {
        const int r = world.rank();
        std::vector<float> g(k_flat, 0.0f);
        GradSync s(g.data(), k_flat, world, options(ZeroStage::gradients));
        for (int step = 0; step < 2; ++step) {
            s.begin_step();
            std::fill(g.begin(), g.end(), 0.0f);  // the caller's zero_grad
            for (int k = 0; k < ga; ++k) {
                s.begin_micro_batch(k == ga - 1);
                // The previous micro-batch was collected: backward starts from zero.
                ASSERT_TRUE(std::all_of(g.begin(), g.end(), [](float x) { return x == 0.0f; }))
                    << "micro-batch " << k;
                for (int64_t i = 0; i < k_flat; ++i) g[size_t(i)] += grad_value(r, k + step, i);
                report_top_down(s, k_flat);
                s.end_micro_batch();
            }
            s.finalize();
            EXPECT_EQ(s.stats().launched_by_hook, int64_t(s.buckets().size()) * ga);
            for (const ShardPiece& p : s.pieces())
                for (int64_t i = p.flat_begin; i < p.flat_end; ++i) {
                    float want = 0;
                    for (int k = 0; k < ga; ++k)
                        for (int q = 0; q < dp; ++q) want += grad_value(q, k + step, i);
                    ASSERT_EQ(s.shard_grads().as<float>()[p.shard_begin + i - p.flat_begin], want)
                        << "rank " << r << " element " << i;
                }
        }
    });
}

TEST(GradSync, FinalizeWithoutMicroBatchBracketsReducesEverything) {
    comm_local_run(2, [&](Communicator& world) {
        std::vector<float> g(k_flat, float(world.rank() + 1));
        GradSync s(g.data(), k_flat, world, options(ZeroStage::none));
        s.begin_step();
        s.finalize();
        EXPECT_EQ(s.stats().launched_at_end, int64_t(s.buckets().size()));
        EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float x) { return x == 3.0f; }));
    });
}

// Sparse embedding rows: a table of k_rows x k_width at the bottom of the
// buffer. Rank r keeps rows for ids with repeats and the padding id; the last
// rank keeps none (as a rank whose micro-batch had no labels).
constexpr int64_t k_rows = 30, k_width = 10, k_pad = 3;

struct RankRows {
    std::vector<int64_t> ids;
    std::vector<float> rows;
    EmbeddingGradRows view() const {
        EmbeddingGradRows v;
        v.offset = 0;
        v.table_rows = k_rows;
        v.width = k_width;
        v.count = int64_t(ids.size());
        v.ids = ids.data();
        v.rows = rows.data();
        v.padding_idx = k_pad;
        return v;
    }
};

RankRows rank_rows(int r, int dp, int k) {
    RankRows out;
    if (r == dp - 1 && dp > 1) return out;
    out.ids = {5, k_pad, 5, 29, 0, int64_t(7 + r + k), 5};
    for (size_t t = 0; t < out.ids.size(); ++t)
        for (int64_t j = 0; j < k_width; ++j)
            out.rows.push_back(float(int((int64_t(t) * 3 + j + r * 7 + k) % 11) - 5) / 64.0f);
    return out;
}

// The summed gradient of element i: every rank's dense value plus every
// non-padding row that lands on i.
float sparse_want(int dp, const std::vector<int>& micro, int64_t i) {
    float want = 0;
    for (int k : micro)
        for (int q = 0; q < dp; ++q) {
            want += grad_value(q, k, i);
            const RankRows rr = rank_rows(q, dp, k);
            for (size_t t = 0; t < rr.ids.size(); ++t)
                if (rr.ids[t] != k_pad && i / k_width == rr.ids[t] && i < k_rows * k_width)
                    want += rr.rows[t * size_t(k_width) + size_t(i % k_width)];
        }
    return want;
}

// Reports the table first, then the rest top down; returns the buckets the
// first report launched.
int64_t report_table_first(GradSync& s) {
    const int64_t before = s.stats().launched_by_hook;
    s.grads_ready(0, k_rows * k_width);
    const int64_t early = s.stats().launched_by_hook - before;
    for (int64_t hi = k_flat; hi > k_rows * k_width;) {
        const int64_t lo = std::max<int64_t>(k_rows * k_width, hi - 77);
        s.grads_ready(lo, hi);
        hi = lo;
    }
    return early;
}

TEST(GradSync, SparseRowsAreAddedIntoTheReducedGradients) {
    for (ZeroStage z : {ZeroStage::none, ZeroStage::optimizer, ZeroStage::gradients}) {
        for (int dp : {2, 3}) {
            comm_local_run(dp, [&](Communicator& world) {
                const int r = world.rank();
                std::vector<float> g(k_flat, 0.0f);
                GradSync s(g.data(), k_flat, world, options(z));
                s.set_sparse_rows(0, k_rows * k_width);
                int64_t inside = 0;
                for (const GradBucket& b : s.buckets()) inside += b.end <= k_rows * k_width;
                ASSERT_GT(inside, 0) << "the test needs a bucket inside the table";
                // ZeRO-2 reduces (and keeps rows) on every micro-batch; the
                // others only on the last, the earlier ones adding densely.
                const int ga = z == ZeroStage::gradients ? 2 : 1;
                s.begin_step();
                std::vector<int> micro;
                for (int k = 0; k < ga; ++k) {
                    micro.push_back(k);
                    // (after begin_micro_batch: there ZeRO-2 zeroes the buffer)
                    s.begin_micro_batch(k == ga - 1);
                    for (int64_t i = 0; i < k_flat; ++i) g[size_t(i)] += grad_value(r, k, i);
                    const RankRows rr = rank_rows(r, dp, k);
                    if (r == dp - 1) {
                        s.end_micro_batch();  // skipped backward: everything posts here
                        continue;
                    }
                    EXPECT_EQ(report_table_first(s), inside)
                        << "the table's buckets launch as soon as it is reported";
                    s.end_micro_batch(rr.view());
                }
                s.finalize(0.5);
                const std::string where = std::string(zero_stage_name(z)) + " dp " +
                                          std::to_string(dp) + " rank " + std::to_string(r);
                EXPECT_GT(s.stats().sparse_rows, 0) << where;
                if (z == ZeroStage::none) {
                    for (int64_t i = 0; i < k_flat; ++i)
                        ASSERT_EQ(g[size_t(i)], sparse_want(dp, micro, i) * 0.5f)
                            << where << " element " << i;
                    return;
                }
                for (const ShardPiece& p : s.pieces())
                    for (int64_t i = p.flat_begin; i < p.flat_end; ++i)
                        ASSERT_EQ(s.shard_grads().as<float>()[p.shard_begin + i - p.flat_begin],
                                  sparse_want(dp, micro, i) * 0.5f)
                            << where << " element " << i;
            });
        }
    }
}

TEST(GradSync, SparseRowsNeedTheirRangeAndAReducingMicroBatch) {
    auto world = comm_local_create(1);
    std::vector<float> g(k_flat, 1.0f);
    const RankRows rr = rank_rows(0, 1, 0);
    {
        GradSync s(g.data(), k_flat, *world[0], options(ZeroStage::none));
        s.begin_step();
        s.begin_micro_batch(true);
        EXPECT_THROW(s.end_micro_batch(rr.view()), Error);  // no set_sparse_rows
    }
    {
        GradSync s(g.data(), k_flat, *world[0], options(ZeroStage::none));
        EXPECT_THROW(s.set_sparse_rows(0, k_flat + 1), Error);
        s.set_sparse_rows(0, k_rows * k_width);
        s.begin_step();
        s.begin_micro_batch(false);
        EXPECT_THROW(s.end_micro_batch(rr.view()), Error);  // not reduced on this micro-batch
    }
    {
        GradSync s(g.data(), k_flat, *world[0], options(ZeroStage::none));
        s.set_sparse_rows(0, k_rows * k_width);
        s.begin_step();
        s.begin_micro_batch(true);
        EXPECT_THROW(s.set_sparse_rows(0, 10), Error);  // inside a micro-batch
        RankRows bad = rr;
        bad.ids[1] = k_rows;  // outside the table
        EXPECT_THROW(s.end_micro_batch(bad.view()), Error);
    }
}

TEST(GradSync, MisuseIsReported) {
    auto world = comm_local_create(1);
    std::vector<float> g(k_flat, 1.0f);
    GradSync s(g.data(), k_flat, *world[0], options(ZeroStage::none));
    s.begin_step();
    EXPECT_THROW(s.grads_ready(0, 10), Error);  // outside a micro-batch
    s.begin_micro_batch(true);
    EXPECT_THROW(s.begin_micro_batch(true), Error);
    EXPECT_THROW(s.grads_ready(5, k_flat + 1), Error);
    s.grads_ready(k_flat - 50, k_flat);
    try {
        s.grads_ready(k_flat - 60, k_flat - 40);
        ADD_FAILURE() << "a range reported twice was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("reported final twice"), std::string::npos)
            << e.what();
    }
    EXPECT_THROW(s.finalize(), Error);  // inside the micro-batch
    s.end_micro_batch();
    s.finalize();

    std::vector<float> g2(k_flat, 1.0f);
    GradSync z2(g2.data(), k_flat, *world[0], options(ZeroStage::gradients));
    z2.begin_step();
    EXPECT_THROW(z2.finalize(), Error);  // ZeRO-2 needs the brackets
}

}  // namespace
}  // namespace loom
