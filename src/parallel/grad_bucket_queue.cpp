// GradBucketQueue: the bucket plan and the in-order release rule.
#include "parallel/grad_bucket_queue.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "core/check.h"

namespace loom {

int64_t bucket_elems_for_bytes(double mb, int64_t elem_bytes) {
    LOOM_CHECK(mb > 0, "bucket_size_mb must be > 0, got {}", mb);
    LOOM_CHECK(elem_bytes > 0, "gradient element of {} bytes", elem_bytes);
    return std::max<int64_t>(1, int64_t(mb * double(1 << 20) / double(elem_bytes)));
}

std::vector<FlatRange> grad_bucket_ranges(int64_t flat_numel, int64_t bucket_elems, int64_t align) {
    LOOM_CHECK(flat_numel >= 0 && bucket_elems > 0 && align > 0,
               "gradient buckets: flat buffer of {} elements, bucket of {}, alignment {}",
               flat_numel, bucket_elems, align);
    const int64_t S = (bucket_elems + align - 1) / align * align;
    std::vector<FlatRange> out;
    if (flat_numel == 0) return out;
    // The highest boundary below the top, then down by S.
    for (int64_t begin = (flat_numel - 1) / S * S, end = flat_numel; end > 0;
         end = begin, begin -= S)
        out.push_back({begin, end});
    return out;
}

GradBucketQueue::GradBucketQueue(std::vector<FlatRange> buckets, int64_t flat_numel)
    : buckets_(std::move(buckets)), flat_numel_(flat_numel) {
    int64_t expect_end = flat_numel;
    for (const FlatRange& b : buckets_) {
        LOOM_CHECK(b.end == expect_end && b.begin < b.end,
                   "gradient buckets must tile [0, {}) from the top down; got [{}, {}) where one "
                   "ending at {} was due",
                   flat_numel, b.begin, b.end, expect_end);
        expect_end = b.begin;
    }
    LOOM_CHECK(expect_end == 0, "gradient buckets leave [0, {}) of the buffer uncovered",
               expect_end);
    covered_.assign(buckets_.size(), 0);
}

void GradBucketQueue::reset() {
    std::fill(covered_.begin(), covered_.end(), 0);
    reported_.clear();
    next_ = 0;
}

std::vector<size_t> GradBucketQueue::report(int64_t begin, int64_t end) {
    LOOM_CHECK(0 <= begin && begin <= end && end <= flat_numel_,
               "gradients reported final for [{}, {}) outside the flat buffer of {}", begin, end,
               flat_numel_);
    std::vector<size_t> out;
    if (begin == end) return out;
    auto next = reported_.lower_bound(begin);
    if (next != reported_.end())
        LOOM_CHECK(next->first >= end,
                   "gradients of [{}, {}) reported final twice in one backward (already [{}, {}))",
                   begin, end, next->first, next->second);
    if (next != reported_.begin())
        LOOM_CHECK(std::prev(next)->second <= begin,
                   "gradients of [{}, {}) reported final twice in one backward (already [{}, {}))",
                   begin, end, std::prev(next)->first, std::prev(next)->second);
    reported_.emplace(begin, end);
    for (size_t b = 0; b < buckets_.size(); ++b) {
        const int64_t lo = std::max(begin, buckets_[b].begin), hi = std::min(end, buckets_[b].end);
        if (lo < hi) covered_[b] += hi - lo;
    }
    // In order only: a complete bucket behind an incomplete one waits for it.
    while (next_ < buckets_.size() && covered_[next_] == buckets_[next_].numel())
        out.push_back(next_++);
    return out;
}

std::vector<size_t> GradBucketQueue::flush() {
    std::vector<size_t> out;
    while (next_ < buckets_.size()) out.push_back(next_++);
    return out;
}

}  // namespace loom
