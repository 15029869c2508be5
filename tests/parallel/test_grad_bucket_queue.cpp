// GradBucketQueue: the bucket plan and release order of the GPU data-parallel
// reduction (parallel/cuda/gpu_grad_sync.h), which runs only on GPUs; the
// logic that decides what every rank posts, and in which order, runs here.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "core/check.h"
#include "parallel/grad_bucket_queue.h"

namespace loom {
namespace {

std::vector<size_t> iota(size_t from, size_t to) {
    std::vector<size_t> v(to - from);
    std::iota(v.begin(), v.end(), from);
    return v;
}

TEST(GradBucketRanges, TileTheBufferTopDownOnAlignedBoundaries) {
    for (int64_t flat : {1, 127, 128, 129, 1000, 4096, 100003}) {
        for (int64_t want : {1, 100, 128, 1000, 1 << 20}) {
            const auto bk = grad_bucket_ranges(flat, want);
            const std::string ctx =
                "flat " + std::to_string(flat) + " bucket " + std::to_string(want);
            const int64_t S = (want + 127) / 128 * 128;
            ASSERT_FALSE(bk.empty()) << ctx;
            int64_t end = flat;
            for (size_t b = 0; b < bk.size(); ++b) {
                EXPECT_EQ(bk[b].end, end) << ctx << ": contiguous, top down";
                EXPECT_EQ(bk[b].begin % S, 0) << ctx << ": starts on a bucket boundary";
                EXPECT_GT(bk[b].numel(), 0) << ctx;
                EXPECT_LE(bk[b].numel(), S) << ctx;
                if (b > 0) {
                    EXPECT_EQ(bk[b].numel(), S) << ctx << ": only the top one is short";
                }
                end = bk[b].begin;
            }
            EXPECT_EQ(end, 0) << ctx;
            EXPECT_EQ(int64_t(bk.size()), (flat + S - 1) / S) << ctx;
        }
    }
    EXPECT_TRUE(grad_bucket_ranges(0, 1000).empty());
    EXPECT_THROW(grad_bucket_ranges(10, 0), Error);
    EXPECT_THROW(grad_bucket_ranges(-1, 10), Error);
}

TEST(GradBucketRanges, BucketSizeCountsBytesOfTheGradientType) {
    EXPECT_EQ(bucket_elems_for_bytes(1.0, 4), 1 << 18);
    EXPECT_EQ(bucket_elems_for_bytes(1.0, 2), 1 << 19) << "bf16 buckets hold twice the elements";
    EXPECT_EQ(bucket_elems_for_bytes(1e-9, 4), 1) << "never an empty bucket";
    EXPECT_THROW(bucket_elems_for_bytes(0.0, 4), Error);
    EXPECT_THROW(bucket_elems_for_bytes(-1.0, 2), Error);
}

TEST(GradBucketQueue, ReleasesBucketsAsBackwardReportsSuffixes) {
    // 1000 elements, buckets of 256: [768, 1000) [512, 768) [256, 512) [0, 256).
    GradBucketQueue q(grad_bucket_ranges(1000, 256), 1000);
    ASSERT_EQ(q.buckets().size(), 4u);
    EXPECT_EQ(q.buckets()[0], (FlatRange{768, 1000}));
    // The head and top layer: not all of bucket 0 yet.
    EXPECT_TRUE(q.report(900, 1000).empty());
    EXPECT_EQ(q.report(700, 900), (std::vector<size_t>{0}));
    // Finishes buckets 1 and 2 at once: both, in order.
    EXPECT_EQ(q.report(256, 700), (std::vector<size_t>{1, 2}));
    EXPECT_EQ(q.released(), 3u);
    // The embeddings come last (or at flush).
    EXPECT_EQ(q.flush(), (std::vector<size_t>{3}));
    EXPECT_TRUE(q.all_released());
    EXPECT_TRUE(q.flush().empty()) << "a second flush posts nothing twice";
}

TEST(GradBucketQueue, NeverReleasesABucketBeforeTheOnesAboveIt) {
    // Every rank must post the same collectives in the same order: a bottom
    // bucket finished first waits until the top ones are released.
    GradBucketQueue q(grad_bucket_ranges(1024, 256), 1024);
    EXPECT_TRUE(q.report(0, 256).empty());
    EXPECT_TRUE(q.report(512, 768).empty());
    EXPECT_EQ(q.report(768, 1024), (std::vector<size_t>{0, 1}));
    EXPECT_EQ(q.report(256, 512), (std::vector<size_t>{2, 3}));
    EXPECT_TRUE(q.all_released());
}

TEST(GradBucketQueue, AnyReportPatternPostsEveryBucketOnceInOrder) {
    // Random splits of the buffer into reported pieces, reported in random
    // order, some never reported (flushed): the posting sequence is always
    // 0, 1, ..., n-1.
    uint64_t seed = 12345;
    auto next = [&seed](uint64_t n) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        return (seed >> 33) % n;
    };
    for (int trial = 0; trial < 200; ++trial) {
        const int64_t flat = 1 + int64_t(next(5000));
        GradBucketQueue q(grad_bucket_ranges(flat, 1 + int64_t(next(1500))), flat);
        std::vector<int64_t> cuts{0, flat};
        for (int c = 0, n = int(next(12)); c < n; ++c)
            cuts.push_back(int64_t(next(uint64_t(flat))));
        std::sort(cuts.begin(), cuts.end());
        cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
        std::vector<FlatRange> pieces;
        for (size_t i = 0; i + 1 < cuts.size(); ++i) pieces.push_back({cuts[i], cuts[i + 1]});
        for (size_t i = pieces.size(); i > 1; --i) std::swap(pieces[i - 1], pieces[next(i)]);
        const size_t reported = next(pieces.size() + 1);
        for (int pass = 0; pass < 2; ++pass) {  // reset() starts a fresh backward
            q.reset();
            std::vector<size_t> posted;
            for (size_t i = 0; i < reported; ++i)
                for (size_t b : q.report(pieces[i].begin, pieces[i].end)) posted.push_back(b);
            for (size_t b : q.flush()) posted.push_back(b);
            EXPECT_EQ(posted, iota(0, q.buckets().size())) << "trial " << trial;
        }
    }
}

TEST(GradBucketQueue, RefusesRangesOutsideTheBufferOrReportedTwice) {
    GradBucketQueue q(grad_bucket_ranges(512, 128), 512);
    EXPECT_THROW(q.report(-1, 10), Error);
    EXPECT_THROW(q.report(500, 513), Error);
    EXPECT_THROW(q.report(20, 10), Error);
    EXPECT_TRUE(q.report(5, 5).empty()) << "an empty range is nothing";
    q.report(400, 512);
    EXPECT_THROW(q.report(300, 401), Error) << "overlaps the reported [400, 512)";
    EXPECT_THROW(q.report(450, 460), Error);
    q.report(100, 300);
    EXPECT_THROW(q.report(299, 350), Error) << "overlaps the reported [100, 300)";
    EXPECT_NO_THROW(q.report(300, 400));
    q.reset();
    EXPECT_NO_THROW(q.report(400, 512)) << "a new backward reports afresh";
}

TEST(GradBucketQueue, RefusesAPlanThatDoesNotTileTheBuffer) {
    EXPECT_THROW(GradBucketQueue({{0, 100}}, 200), Error);
    EXPECT_THROW(GradBucketQueue({{100, 200}}, 200), Error);
    EXPECT_THROW(GradBucketQueue({{0, 100}, {100, 200}}, 200), Error) << "bottom-up order";
    EXPECT_NO_THROW(GradBucketQueue({{100, 200}, {0, 100}}, 200));
    EXPECT_NO_THROW(GradBucketQueue({}, 0));
}

}  // namespace
}  // namespace loom
