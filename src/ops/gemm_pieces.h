// How one large GEMM is shared among a team: in pieces the threads take as
// they come free, instead of one equal part each.
//
// Why: with equal parts a region lasts as long as its slowest thread, and on
// a machine Loom does not have to itself one thread shares its core with
// another process and runs at half speed while the others wait for it. The
// pieces are 2 per thread: the output is cut into one block per thread, and
// each block into a large piece (k_first_share of it) and a small one. The
// large pieces go first, one to each thread; a thread that has its core to
// itself finishes its large piece early and takes small ones, so the slow
// thread does less. Measured on the BERT-base layer's GEMMs (2 threads
// pinned, 2 cores, one busy loop beside them): 1.44x the quiet time where
// oneDNN's own equal split took 1.77x; quiet, -5% to +5.5% per shape where
// they are used (docs/cpu-contention.md).
//
// The pieces depend only on the shape and the thread count, never on timing,
// so a GEMM rounds the same way on every run (which thread computes a piece
// does not change its result).
#pragma once

#include <cstdint>
#include <vector>

namespace loom {

struct GemmPiece {
    int64_t row, rows, col, cols;  // C[row : row + rows, col : col + cols]
};

inline constexpr double k_first_share = 0.7;
// Smaller GEMMs run whole (~2 ms on one core): the pieces would not pay.
inline constexpr int64_t k_pieces_min_macs = int64_t(1) << 27;

// The pieces of C (M, N), large ones first; empty when the GEMM runs whole
// (fewer than 2 threads, too small, K more than twice the output's short
// side, or too narrow to cut in 16-wide parts).
std::vector<GemmPiece> gemm_pieces(int64_t M, int64_t N, int64_t K, int threads);

}  // namespace loom
