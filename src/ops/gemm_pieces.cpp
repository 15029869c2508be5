#include "ops/gemm_pieces.h"

#include <algorithm>

namespace loom {
namespace {

constexpr int64_t k_align = 16;  // cuts on whole vector widths of the kernels

int64_t aligned_cut(int64_t len, double share) {
    return std::min(len, (int64_t(double(len) * share) + k_align - 1) / k_align * k_align);
}

}  // namespace

std::vector<GemmPiece> gemm_pieces(int64_t M, int64_t N, int64_t K, int threads) {
    if (threads < 2 || M <= 0 || N <= 0 || M * N * K < k_pieces_min_macs) return {};
    // A K much longer than the output is narrow (the FFN's second GEMM and its
    // input gradient: 1024 x 768 from K = 3072) cost 8-12% more in pieces,
    // quiet, where the other shapes cost 0-2%: each piece packs its long
    // panels of the operands again. Those run whole.
    if (K > 2 * std::min(M, N)) return {};
    // The long side is cut into large and small pieces, the short side into
    // one part per thread: measured the cheapest way to 4 pieces at 2
    // threads (cutting the long side 4 ways packed the other operand twice
    // as often and cost twice as much, quiet).
    const bool long_rows = M >= N;
    const int64_t len_long = long_rows ? M : N, len_short = long_rows ? N : M;
    // The short side in 16-wide units, as evenly as they go: parts differ by
    // one unit at most (the last may end short of a whole one).
    const int64_t units = (len_short + k_align - 1) / k_align;
    const int64_t cut = aligned_cut(len_long, k_first_share);
    if (units < threads || cut < k_align || cut >= len_long) return {};
    auto edge = [&](int64_t t) { return std::min(len_short, t * units / threads * k_align); };
    std::vector<GemmPiece> pieces;
    pieces.reserve(size_t(2 * threads));
    for (int64_t first = 1; first >= 0; --first) {
        const int64_t a = first ? 0 : cut, b = first ? cut : len_long;
        for (int t = 0; t < threads; ++t) {
            const int64_t s0 = edge(t), s1 = edge(t + 1);
            pieces.push_back(long_rows ? GemmPiece{a, b - a, s0, s1 - s0}
                                       : GemmPiece{s0, s1 - s0, a, b - a});
        }
    }
    return pieces;
}

}  // namespace loom
