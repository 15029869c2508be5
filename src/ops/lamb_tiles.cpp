// LambTiles planning (lamb_tiles.h): a stable bucket sort of the pieces by
// row, then each piece cut into tiles.
#include "ops/lamb_tiles.h"

#include <algorithm>

#include "core/check.h"

namespace loom {

LambTiles lamb_tiles_plan(const std::vector<LambPiece>& pieces, int32_t rows, int64_t tile_elems) {
    LOOM_CHECK(rows >= 0, "lamb tiles: negative row count {}", rows);
    LOOM_CHECK(tile_elems > 0 && tile_elems <= (int64_t(1) << 30),
               "lamb tiles: tile size {} out of range", tile_elems);
    std::vector<std::vector<const LambPiece*>> by_row{size_t(rows)};
    for (const LambPiece& p : pieces) {
        LOOM_CHECK(p.n >= 0, "lamb tiles: piece of row {} has {} elements", p.row, p.n);
        LOOM_CHECK(p.row >= 0 && p.row < rows, "lamb tiles: row {} outside [0, {})", p.row, rows);
        if (p.n > 0) by_row[size_t(p.row)].push_back(&p);
    }
    LambTiles out;
    out.row_begin.reserve(size_t(rows) + 1);
    for (int32_t r = 0; r < rows; ++r) {
        out.row_begin.push_back(int64_t(out.tiles.size()));
        for (const LambPiece* p : by_row[size_t(r)]) {
            for (int64_t off = 0; off < p->n; off += tile_elems) {
                LambTile t;
                t.param = p->param + off;
                t.state = p->state + off;
                t.n = int32_t(std::min(tile_elems, p->n - off));
                t.row = r;
                t.adapt = p->adapt ? 1 : 0;
                out.tiles.push_back(t);
            }
            out.elems += p->n;
        }
    }
    out.row_begin.push_back(int64_t(out.tiles.size()));
    return out;
}

}  // namespace loom
