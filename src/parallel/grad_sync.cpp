// GradSync: bucket plan, hook-driven launches, and the finalize step.
#include "parallel/grad_sync.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>

#include "core/check.h"

namespace loom {

namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string_view zero_stage_name(ZeroStage z) {
    switch (z) {
        case ZeroStage::none: return "none";
        case ZeroStage::optimizer: return "zero1";
        case ZeroStage::gradients: return "zero2";
    }
    return "?";
}

int64_t GradBucket::chunk_begin(int r) const { return std::min(end, begin + int64_t(r) * chunk); }
int64_t GradBucket::chunk_end(int r) const { return std::min(end, begin + int64_t(r + 1) * chunk); }

int64_t bucket_elems_from_mb(double mb) {
    LOOM_CHECK(mb > 0, "bucket_size_mb must be > 0, got {}", mb);
    return std::max<int64_t>(1, int64_t(mb * double(1 << 20) / double(sizeof(float))));
}

std::vector<GradBucket> grad_buckets_plan(int64_t flat_numel, int64_t bucket_elems, int dp_size) {
    LOOM_CHECK(flat_numel >= 0 && bucket_elems > 0 && dp_size > 0,
               "gradient buckets: flat buffer of {} elements, bucket of {}, dp size {}",
               flat_numel, bucket_elems, dp_size);
    const int64_t S = round_up(bucket_elems, 16 * int64_t(dp_size));
    std::vector<GradBucket> out;
    for (int64_t end = flat_numel; end > 0; end -= S) {
        GradBucket b;
        b.end = end;
        b.begin = std::max<int64_t>(0, end - S);
        b.chunk = round_up((b.numel() + dp_size - 1) / dp_size, 16);
        out.push_back(b);
    }
    return out;
}

std::vector<ShardPiece> shard_pieces(const std::vector<GradBucket>& buckets, int rank) {
    std::vector<ShardPiece> out;
    int64_t at = 0;
    for (const GradBucket& b : buckets) {
        ShardPiece p;
        p.flat_begin = b.chunk_begin(rank);
        p.flat_end = b.chunk_end(rank);
        p.shard_begin = at;
        p.chunk = b.chunk;
        at += b.chunk;
        out.push_back(p);
    }
    return out;
}

int64_t shard_numel(const std::vector<GradBucket>& buckets) {
    int64_t n = 0;
    for (const GradBucket& b : buckets) n += b.chunk;
    return n;
}

GradSync::GradSync(float* grads, int64_t flat_numel, Communicator& dp,
                   const GradSyncOptions& options)
    : grads_(grads), flat_numel_(flat_numel), dp_(dp), opt_(options) {
    LOOM_ASSERT(grads != nullptr || flat_numel == 0, "GradSync over a null gradient buffer");
    buckets_ = grad_buckets_plan(flat_numel, opt_.bucket_elems, dp.size());
    pieces_ = shard_pieces(buckets_, dp.rank());
    covered_.assign(buckets_.size(), 0);
    work_.resize(buckets_.size());
    launched_.assign(buckets_.size(), false);
    if (opt_.zero != ZeroStage::none) {
        const int64_t n = shard_numel(buckets_);
        shard_grads_.assign(size_t(n), 0.0f);
        if (opt_.zero == ZeroStage::gradients) shard_recv_.assign(size_t(n), 0.0f);
        for (const GradBucket& b : buckets_)
            if (b.padded(dp.size())) staging_.assign(size_t(b.chunk * dp.size()), 0.0f);
    }
}

GradSync::~GradSync() {
    // Work handles point into the buffers below: finish them first.
    work_.clear();
}

bool GradSync::reducing() const {
    return in_backward_ && (last_micro_ || opt_.zero == ZeroStage::gradients);
}

void GradSync::begin_step() {
    LOOM_CHECK(!in_backward_, "GradSync::begin_step inside a micro-batch (end_micro_batch missing)");
    wait_all();
    std::fill(shard_grads_.begin(), shard_grads_.end(), 0.0f);
    std::fill(launched_.begin(), launched_.end(), false);
    stats_ = {};
    micro_pending_ = false;
}

void GradSync::begin_micro_batch(bool last) {
    LOOM_CHECK(!in_backward_, "GradSync::begin_micro_batch twice without end_micro_batch");
    // ZeRO-2: the previous micro-batch's reduce-scatter ran during this
    // micro-batch's forward; collect it before backward writes the buffer again.
    if (micro_pending_) collect_micro_batch();
    in_backward_ = true;
    last_micro_ = last;
    std::fill(covered_.begin(), covered_.end(), 0);
    std::fill(launched_.begin(), launched_.end(), false);
    reported_.clear();
}

void GradSync::grads_ready(int64_t begin, int64_t end) {
    LOOM_CHECK(in_backward_,
               "gradients reported final outside GradSync::begin_micro_batch/end_micro_batch");
    LOOM_CHECK(0 <= begin && begin <= end && end <= flat_numel_,
               "gradients reported final for [{}, {}) outside the flat buffer of {}", begin, end,
               flat_numel_);
    if (begin == end) return;
    // Ranges of one backward must be disjoint (else a bucket could launch
    // before all of it is final): check against the ranges seen so far.
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
    if (!reducing()) return;
    for (size_t b = 0; b < buckets_.size(); ++b) {
        const GradBucket& k = buckets_[b];
        const int64_t lo = std::max(begin, k.begin), hi = std::min(end, k.end);
        if (lo < hi) covered_[b] += hi - lo;
    }
    if (opt_.overlap) {
        // Launch in bucket order; every rank sees the same reports, so every
        // rank issues the same collectives in the same order.
        for (size_t b = 0; b < buckets_.size(); ++b) {
            if (launched_[b] || covered_[b] != buckets_[b].numel()) continue;
            launch(b);
            ++stats_.launched_by_hook;
        }
    }
    for (auto& w : work_)
        if (w) w->test();  // Open MPI progresses nonblocking collectives only in MPI calls
}

void GradSync::launch(size_t b) {
    const GradBucket& k = buckets_[b];
    LOOM_ASSERT(!work_[b], "bucket {} launched while its previous reduction is in flight", b);
    launched_[b] = true;
    if (opt_.zero == ZeroStage::none) {
        // DDP: in-place sum of the bucket on the dp group.
        work_[b] = dp_.all_reduce(grads_ + k.begin, k.numel(), DType::f32, ReduceOp::sum);
        return;
    }
    // ZeRO: reduce-scatter on the dp group; chunk r of the bucket lands on rank r.
    const float* send = grads_ + k.begin;
    if (k.padded(dp_.size())) {
        std::memcpy(staging_.data(), send, size_t(k.numel()) * sizeof(float));
        std::fill(staging_.begin() + k.numel(), staging_.end(), 0.0f);
        send = staging_.data();
    }
    float* recv = (opt_.zero == ZeroStage::optimizer ? shard_grads_.data() : shard_recv_.data()) +
                  pieces_[b].shard_begin;
    work_[b] = dp_.reduce_scatter(send, recv, k.chunk, DType::f32, ReduceOp::sum);
}

void GradSync::launch_remaining() {
    std::vector<size_t> recent;  // launched here, oldest first
    for (size_t b = 0; b < buckets_.size(); ++b) {
        if (launched_[b]) continue;
        if (opt_.max_in_flight_at_end > 0 && int(recent.size()) >= opt_.max_in_flight_at_end) {
            // Finish the oldest first; wait_all() later finds its slot empty.
            const size_t oldest = recent.front();
            recent.erase(recent.begin());
            const auto t0 = std::chrono::steady_clock::now();
            if (work_[oldest]) {
                work_[oldest]->wait();
                work_[oldest].reset();
            }
            stats_.wait_s += seconds_since(t0);
        }
        launch(b);
        recent.push_back(b);
        ++stats_.launched_at_end;
    }
}

void GradSync::wait_all() {
    const auto t0 = std::chrono::steady_clock::now();
    bool any = false;
    for (auto& w : work_) {
        if (!w) continue;
        any = true;
        w->wait();
        w.reset();
    }
    if (any) stats_.wait_s += seconds_since(t0);
}

void GradSync::end_micro_batch() {
    LOOM_CHECK(in_backward_, "GradSync::end_micro_batch without begin_micro_batch");
    if (reducing()) launch_remaining();
    if (opt_.zero == ZeroStage::gradients) micro_pending_ = true;
    in_backward_ = false;
}

void GradSync::collect_micro_batch() {
    wait_all();
    for (size_t i = 0; i < shard_grads_.size(); ++i) shard_grads_[i] += shard_recv_[i];
    // The model accumulates (+=) into the flat buffer: the next micro-batch
    // must start from zero, as its gradient is reduced on its own.
    std::memset(grads_, 0, size_t(flat_numel_) * sizeof(float));
    micro_pending_ = false;
}

void GradSync::finalize(double scale) {
    LOOM_CHECK(!in_backward_, "GradSync::finalize inside a micro-batch (end_micro_batch missing)");
    if (opt_.zero == ZeroStage::gradients) {
        LOOM_CHECK(micro_pending_,
                   "ZeRO-2 finalize without a micro-batch: bracket each backward with "
                   "begin_micro_batch/end_micro_batch");
        collect_micro_batch();
    } else {
        // Callers that never bracketed backward (or whose last micro-batch had
        // no labels) reduce everything here.
        launch_remaining();
        wait_all();
    }
    std::fill(launched_.begin(), launched_.end(), false);
    if (scale != 1.0) {
        const float f = float(scale);
        if (opt_.zero == ZeroStage::none) {
            for (int64_t i = 0; i < flat_numel_; ++i) grads_[i] *= f;
        } else {
            for (float& g : shard_grads_) g *= f;
        }
    }
}

}  // namespace loom
