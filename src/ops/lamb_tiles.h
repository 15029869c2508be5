// LambTiles: how the CUDA LAMB (ops/cuda/lamb_cuda.cu) cuts the tensors it
// updates into fixed-size tiles, one thread block each, so that every
// per-tensor norm is a fixed-order sum of per-tile partial sums (no atomics,
// the same bits run to run).
//
// The input is a list of pieces: runs of one parameter tensor (ParamTable
// row) in the master weights and in the gradient/moment buffers. A whole
// tensor is one piece; under ZeRO a tensor cut by bucket chunks gives one
// piece per chunk this rank owns (parallel/zero.h ShardSegment). Tiles come
// out grouped by row, in the pieces' order inside a row, and
// row_begin[r]..row_begin[r + 1] are row r's tiles, so a row's sum walks a
// contiguous range. Rows without pieces have an empty range (their sums stay
// zero, which under ZeRO is this rank's contribution to another rank's row).
// Pure logic, free of CUDA, so the CPU build tests it.
#pragma once

#include <cstdint>
#include <vector>

namespace loom {

// Default tile: 256 threads x 16 elements.
constexpr int64_t k_lamb_tile_elems = 4096;

struct LambPiece {
    int64_t param = 0;  // first element in the master weights
    int64_t state = 0;  // first element in the gradient and moment buffers
    int64_t n = 0;      // elements
    int32_t row = 0;    // ParamTable row
    bool adapt = true;  // weight decay and trust ratio (LAMB's excluded rows: false)
};

// One thread block's work; plain data, copied to the device as is.
struct LambTile {
    int64_t param = 0, state = 0;  // as LambPiece, advanced to the tile
    int32_t n = 0;                 // elements, 1..tile_elems
    int32_t row = 0;
    int32_t adapt = 0;  // 1: weight decay and trust ratio
    int32_t pad = 0;
};

struct LambTiles {
    std::vector<LambTile> tiles;     // grouped by row
    std::vector<int64_t> row_begin;  // (rows + 1) tile ranges per row
    int64_t elems = 0;               // elements over all tiles
};

// `rows`: the ParamTable's row count (every piece's row must be below it).
// Pieces with n == 0 are skipped; throws on a negative n or a bad row.
LambTiles lamb_tiles_plan(const std::vector<LambPiece>& pieces, int32_t rows,
                          int64_t tile_elems = k_lamb_tile_elems);

}  // namespace loom
