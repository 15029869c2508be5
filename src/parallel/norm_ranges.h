// The gradient norm's flat ranges when some of the buffer does not count:
// rows tp replicates count on tp rank 0 only and rows several pipeline stages
// share on their holder only (PipelineParallel::norm_excluded). Under ZeRO the
// reduced gradients live in a shard laid out by bucket chunk (grad_sync.h
// ShardPiece), so the kept flat ranges are mapped into shard offsets; each
// rank sums its part and the dp group sums the partial norms (as ZeroOptimizer::
// grad_norm_sq does on the CPU).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "parallel/grad_sync.h"

namespace loom {

using IndexRange = std::pair<int64_t, int64_t>;  // [first, second)

// The complement of `excluded` (sorted, disjoint, inside [0, n); checked) in
// [0, n), in order, without empty ranges.
std::vector<IndexRange> kept_ranges(int64_t n, const std::vector<IndexRange>& excluded);

// The shard-buffer ranges holding the parts of `pieces` (one rank's, in shard
// order) that lie inside `kept` (sorted, disjoint flat ranges), in shard
// order, ranges touching in the shard merged. A piece's padding past
// flat_end is never included.
std::vector<IndexRange> shard_kept_ranges(const std::vector<ShardPiece>& pieces,
                                          const std::vector<IndexRange>& kept);

}  // namespace loom
