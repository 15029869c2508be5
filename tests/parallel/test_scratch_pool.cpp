// ScratchPool (comm/scratch_pool.h): buffers come back for reuse, live ones
// are never handed out twice, and a buffer may outlive its pool.
#include <gtest/gtest.h>

#include "comm/scratch_pool.h"

using namespace loom;

TEST(ScratchPool, ReusesAReleasedBufferThatIsLargeEnough) {
    auto pool = std::make_shared<ScratchPool>();
    std::byte* first = nullptr;
    {
        auto a = pool->take(1000);
        first = a.get();
        a[999] = std::byte{7};
    }
    EXPECT_EQ(pool->pooled(), 1u);
    auto b = pool->take(500);  // smaller: the same buffer serves
    EXPECT_EQ(b.get(), first);
    EXPECT_EQ(pool->pooled(), 0u);
    auto c = pool->take(2000);  // larger than anything pooled: a new one
    EXPECT_NE(c.get(), first);
}

TEST(ScratchPool, LiveBuffersAreDistinctAndTheSmallestFitIsTaken) {
    auto pool = std::make_shared<ScratchPool>();
    std::byte *big = nullptr, *small = nullptr;
    {
        auto x = pool->take(4096), y = pool->take(64);
        EXPECT_NE(x.get(), y.get());
        big = x.get();
        small = y.get();
    }
    EXPECT_EQ(pool->pooled(), 2u);
    auto z = pool->take(32);
    EXPECT_EQ(z.get(), small);
    auto w = pool->take(100);
    EXPECT_EQ(w.get(), big);
}

TEST(ScratchPool, ABufferMayOutliveItsPool) {
    std::shared_ptr<std::byte[]> kept;
    {
        auto pool = std::make_shared<ScratchPool>();
        kept = pool->take(128);
        kept[127] = std::byte{1};
    }
    EXPECT_EQ(kept[127], std::byte{1});
    kept.reset();  // freed, not returned to a pool that is gone (ASan checks)
}
