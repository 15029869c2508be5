// The gradient norm's kept ranges: the complement of the excluded flat ranges,
// and their mapping into a ZeRO shard (a sharded norm sums exactly these
// shard ranges on each dp rank).
#include <gtest/gtest.h>

#include <vector>

#include "core/check.h"
#include "parallel/grad_sync.h"
#include "parallel/norm_ranges.h"

namespace loom {
namespace {

using Ranges = std::vector<IndexRange>;

TEST(KeptRanges, ComplementInOrderWithoutEmptyRanges) {
    EXPECT_EQ(kept_ranges(10, {}), (Ranges{{0, 10}}));
    EXPECT_EQ(kept_ranges(10, {{2, 4}, {4, 6}, {8, 10}}), (Ranges{{0, 2}, {6, 8}}));
    EXPECT_EQ(kept_ranges(10, {{0, 3}, {5, 5}}), (Ranges{{3, 10}}));
    EXPECT_EQ(kept_ranges(10, {{0, 10}}), Ranges{});
    EXPECT_EQ(kept_ranges(0, {}), Ranges{});
}

TEST(KeptRanges, RejectsUnsortedOverlappingOrOutsideRanges) {
    EXPECT_THROW(kept_ranges(10, {{4, 6}, {2, 3}}), Error);
    EXPECT_THROW(kept_ranges(10, {{2, 6}, {5, 8}}), Error);
    EXPECT_THROW(kept_ranges(10, {{8, 11}}), Error);
    EXPECT_THROW(kept_ranges(10, {{3, 2}}), Error);
}

TEST(ShardKeptRanges, MapsKeptPartsOfPiecesIntoShardOffsets) {
    // Two pieces: flat [10, 20) at shard 0 and flat [40, 45) (a padded chunk
    // of 8) at shard 10.
    const std::vector<ShardPiece> pieces = {{10, 20, 0, 10}, {40, 45, 10, 8}};
    EXPECT_EQ(shard_kept_ranges(pieces, {{0, 100}}), (Ranges{{0, 15}}));  // merged across pieces
    EXPECT_EQ(shard_kept_ranges(pieces, {{12, 14}, {16, 42}}), (Ranges{{2, 4}, {6, 12}}));
    EXPECT_EQ(shard_kept_ranges(pieces, {{0, 10}, {20, 40}, {45, 60}}), Ranges{});
    EXPECT_EQ(shard_kept_ranges(pieces, {}), Ranges{});
    EXPECT_EQ(shard_kept_ranges({}, {{0, 100}}), Ranges{});
}

// Every rank's shard of a real bucket plan: the kept ranges of all ranks
// together cover each kept flat element exactly once and nothing else (no
// excluded element, no padding), so the partial sums add up over dp to the
// unsharded norm.
TEST(ShardKeptRanges, RanksTogetherCoverEachKeptElementOnce) {
    const int64_t n = 103;
    const Ranges excluded = {{0, 3}, {17, 29}, {30, 31}, {64, 80}, {99, 103}};
    const Ranges kept = kept_ranges(n, excluded);
    for (int dp : {1, 2, 3, 4}) {
        for (int64_t bucket : {7, 16, 200}) {
            const std::vector<GradBucket> buckets = grad_buckets_plan(n, bucket, dp);
            std::vector<int> seen(size_t(n), 0);
            for (int r = 0; r < dp; ++r) {
                const std::vector<ShardPiece> pieces = shard_pieces(buckets, r);
                // Shard position -> flat element (-1: padding).
                std::vector<int64_t> flat_of(size_t(shard_numel(buckets)), -1);
                for (const ShardPiece& p : pieces) {
                    for (int64_t i = p.flat_begin; i < p.flat_end; ++i)
                        flat_of[size_t(p.shard_begin + i - p.flat_begin)] = i;
                }
                const Ranges got = shard_kept_ranges(pieces, kept);
                for (size_t k = 0; k < got.size(); ++k) {
                    ASSERT_LT(got[k].first, got[k].second) << "dp " << dp << " rank " << r;
                    if (k > 0) {
                        ASSERT_LT(got[k - 1].second, got[k].first) << "not merged or not sorted";
                    }
                    for (int64_t s = got[k].first; s < got[k].second; ++s) {
                        const int64_t f = flat_of[size_t(s)];
                        ASSERT_GE(f, 0) << "padding counted: dp " << dp << " rank " << r;
                        ++seen[size_t(f)];
                    }
                }
            }
            for (int64_t i = 0; i < n; ++i) {
                bool is_kept = false;
                for (const auto& [b, e] : kept) is_kept = is_kept || (i >= b && i < e);
                EXPECT_EQ(seen[size_t(i)], is_kept ? 1 : 0)
                    << "element " << i << ", dp " << dp << ", bucket " << bucket;
            }
        }
    }
}

}  // namespace
}  // namespace loom
