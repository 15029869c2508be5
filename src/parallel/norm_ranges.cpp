#include "parallel/norm_ranges.h"

#include <algorithm>

#include "core/check.h"

namespace loom {

std::vector<IndexRange> kept_ranges(int64_t n, const std::vector<IndexRange>& excluded) {
    std::vector<IndexRange> keep;
    int64_t at = 0;
    for (const auto& [b, e] : excluded) {
        LOOM_CHECK(b >= at && e >= b && e <= n,
                   "gradient norm: excluded ranges must be sorted, disjoint and inside [0, {}), "
                   "got [{}, {}) after {}",
                   n, b, e, at);
        if (b == e) continue;  // an empty row splits nothing
        if (b > at) keep.emplace_back(at, b);
        at = e;
    }
    if (at < n) keep.emplace_back(at, n);
    return keep;
}

std::vector<IndexRange> shard_kept_ranges(const std::vector<ShardPiece>& pieces,
                                          const std::vector<IndexRange>& kept) {
    std::vector<IndexRange> out;
    for (const ShardPiece& p : pieces) {
        // The first kept range that may reach into the piece.
        auto it = std::upper_bound(kept.begin(), kept.end(), p.flat_begin,
                                   [](int64_t v, const IndexRange& r) { return v < r.second; });
        for (; it != kept.end() && it->first < p.flat_end; ++it) {
            const int64_t lo = std::max(p.flat_begin, it->first);
            const int64_t hi = std::min(p.flat_end, it->second);
            if (lo >= hi) continue;
            const int64_t b = p.shard_begin + (lo - p.flat_begin);
            const int64_t e = b + (hi - lo);
            if (!out.empty() && out.back().second == b)
                out.back().second = e;
            else
                out.emplace_back(b, e);
        }
    }
    return out;
}

}  // namespace loom
