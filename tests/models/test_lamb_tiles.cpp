// lamb_tiles_plan (ops/lamb_tiles.h): the tile list the CUDA LAMB reduces
// per tensor. Checked: tiles cover every piece exactly once with the right
// param/state offsets, are grouped by row in the pieces' order inside a row,
// row ranges are contiguous and empty for rows without pieces, and bad input
// throws.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "core/check.h"
#include "ops/lamb_tiles.h"

namespace loom::test {
namespace {

TEST(LambTiles, CoverEveryPieceOnceGroupedByRow) {
    // Row 2 is cut into two pieces (a ZeRO chunk boundary) listed apart,
    // with row 0 between them; row 1 has none; one piece is empty.
    const std::vector<LambPiece> pieces = {
        {.param = 1000, .state = 0, .n = 10, .row = 2, .adapt = true},
        {.param = 0, .state = 10, .n = 9, .row = 0, .adapt = false},
        {.param = 500, .state = 19, .n = 0, .row = 3, .adapt = true},
        {.param = 1010, .state = 19, .n = 3, .row = 2, .adapt = true},
    };
    const LambTiles t = lamb_tiles_plan(pieces, 4, 4);
    ASSERT_EQ(t.row_begin.size(), 5u);
    EXPECT_EQ(t.elems, 22);
    // Row 0: 9 elements in tiles of 4 -> 4, 4, 1.
    EXPECT_EQ(t.row_begin[0], 0);
    EXPECT_EQ(t.row_begin[1], 3);
    EXPECT_EQ(t.row_begin[2], 3) << "row 1 has no tiles";
    // Row 2: 10 -> 4, 4, 2, then the second piece's 3.
    EXPECT_EQ(t.row_begin[3], 7);
    EXPECT_EQ(t.row_begin[4], 7) << "row 3's only piece is empty";
    ASSERT_EQ(t.tiles.size(), 7u);
    const LambTile& a = t.tiles[2];
    EXPECT_EQ(a.param, 8);
    EXPECT_EQ(a.state, 18);
    EXPECT_EQ(a.n, 1);
    EXPECT_EQ(a.row, 0);
    EXPECT_EQ(a.adapt, 0);
    const LambTile& b = t.tiles[5];
    EXPECT_EQ(b.param, 1008);
    EXPECT_EQ(b.state, 8);
    EXPECT_EQ(b.n, 2);
    EXPECT_EQ(b.adapt, 1);
    const LambTile& c = t.tiles[6];
    EXPECT_EQ(c.param, 1010);
    EXPECT_EQ(c.state, 19);
    EXPECT_EQ(c.n, 3);
    EXPECT_EQ(c.row, 2);
    // Every state element appears once, with param - state fixed per piece.
    std::map<int64_t, int64_t> seen;  // state -> param
    for (const LambTile& x : t.tiles) {
        EXPECT_GE(x.n, 1);
        EXPECT_LE(x.n, 4);
        for (int32_t i = 0; i < x.n; ++i)
            EXPECT_TRUE(seen.emplace(x.state + i, x.param + i).second) << x.state + i;
    }
    EXPECT_EQ(seen.size(), 22u);
    EXPECT_EQ(seen.at(10), 0);
    EXPECT_EQ(seen.at(21), 1012);
}

TEST(LambTiles, RowsRangesEmptyWithoutPieces) {
    const LambTiles t = lamb_tiles_plan({}, 3);
    EXPECT_TRUE(t.tiles.empty());
    EXPECT_EQ(t.row_begin, (std::vector<int64_t>{0, 0, 0, 0}));
}

TEST(LambTiles, RefusesBadPieces) {
    EXPECT_THROW(lamb_tiles_plan({{.param = 0, .state = 0, .n = 4, .row = 3}}, 3), Error);
    EXPECT_THROW(lamb_tiles_plan({{.param = 0, .state = 0, .n = -1, .row = 0}}, 3), Error);
    EXPECT_THROW(lamb_tiles_plan({}, 3, 0), Error);
}

}  // namespace
}  // namespace loom::test
