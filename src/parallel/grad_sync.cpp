// GradSync: bucket plan, hook-driven launches, and the finalize step.
#include "parallel/grad_sync.h"

#include <algorithm>
#include <chrono>
#include <iterator>

#include "core/check.h"
#include "ops/device_ops.h"

namespace loom {

namespace {

int64_t round_up(int64_t x, int64_t m) {
    return (x + m - 1) / m * m;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string_view zero_stage_name(ZeroStage z) {
    switch (z) {
        case ZeroStage::none:
            return "none";
        case ZeroStage::optimizer:
            return "zero1";
        case ZeroStage::gradients:
            return "zero2";
    }
    return "?";
}

int64_t GradBucket::chunk_begin(int r) const {
    return std::min(end, begin + int64_t(r) * chunk);
}
int64_t GradBucket::chunk_end(int r) const {
    return std::min(end, begin + int64_t(r + 1) * chunk);
}

int64_t bucket_elems_from_mb(double mb) {
    LOOM_CHECK(mb > 0, "bucket_size_mb must be > 0, got {}", mb);
    return std::max<int64_t>(1, int64_t(mb * double(1 << 20) / double(sizeof(float))));
}

std::vector<GradBucket> grad_buckets_plan(int64_t flat_numel, int64_t bucket_elems, int dp_size,
                                          int64_t first) {
    LOOM_CHECK(flat_numel >= 0 && bucket_elems > 0 && dp_size > 0,
               "gradient buckets: flat buffer of {} elements, bucket of {}, dp size {}", flat_numel,
               bucket_elems, dp_size);
    const int64_t S = round_up(bucket_elems, 16 * int64_t(dp_size));
    std::vector<GradBucket> out;
    LOOM_CHECK(0 <= first && first <= flat_numel, "gradient buckets from {} of {} elements", first,
               flat_numel);
    for (int64_t end = flat_numel; end > first; end -= S) {
        GradBucket b;
        b.end = end;
        b.begin = std::max<int64_t>(first, end - S);
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

GradSync::GradSync(ActPtr grads, int64_t flat_numel, Communicator& dp,
                   const GradSyncOptions& options, Backend& backend)
    : grads_(grads),
      flat_numel_(flat_numel),
      dp_(dp),
      be_(backend),
      dtype_(grads.dtype()),
      opt_(options) {
    LOOM_ASSERT(grads || flat_numel == 0, "GradSync over a null gradient buffer");
    buckets_ = grad_buckets_plan(flat_numel, opt_.bucket_elems, dp.size(), opt_.first_elem);
    pieces_ = shard_pieces(buckets_, dp.rank());
    covered_.assign(buckets_.size(), 0);
    launch_order_.resize(buckets_.size());
    for (size_t b = 0; b < buckets_.size(); ++b) launch_order_[b] = b;
    work_.resize(buckets_.size());
    launched_.assign(buckets_.size(), false);
    if (opt_.zero != ZeroStage::none) {
        const size_t es = dtype_size(dtype_);
        shard_n_ = shard_numel(buckets_);
        shard_grads_ = be_.alloc(size_t(shard_n_) * es);
        if (opt_.zero == ZeroStage::gradients) shard_recv_ = be_.alloc(size_t(shard_n_) * es);
        for (const GradBucket& b : buckets_)
            if (b.padded(dp.size())) staging_ = be_.alloc(size_t(b.chunk * dp.size()) * es);
    }
    pieces_by_flat_.resize(pieces_.size());
    for (size_t i = 0; i < pieces_.size(); ++i) pieces_by_flat_[i] = i;
    std::sort(pieces_by_flat_.begin(), pieces_by_flat_.end(),
              [&](size_t a, size_t b) { return pieces_[a].flat_begin < pieces_[b].flat_begin; });
}

GradSync::~GradSync() {
    // Work handles point into the buffers below: finish them first.
    work_.clear();
    rows_.ids_work.reset();
    rows_.rows_work.reset();
}

bool GradSync::reducing() const {
    return in_backward_ && (last_micro_ || opt_.zero == ZeroStage::gradients);
}

void GradSync::begin_step() {
    LOOM_CHECK(!in_backward_,
               "GradSync::begin_step inside a micro-batch (end_micro_batch missing)");
    wait_all();
    if (rows_.pending) {  // an abandoned step's rows: finish the exchange, drop them
        rows_.ids_work->wait();
        rows_.rows_work->wait();
        rows_.ids_work.reset();
        rows_.rows_work.reset();
        rows_.pending = false;
    }
    if (shard_grads_) zero(shard_grads(), shard_n_);
    std::fill(launched_.begin(), launched_.end(), false);
    next_launch_ = 0;
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
    next_launch_ = 0;
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
        // In the fixed launch order only (see the header), so that every rank
        // posts the same collectives in the same order.
        while (next_launch_ < launch_order_.size()) {
            const size_t b = launch_order_[next_launch_];
            if (covered_[b] != buckets_[b].numel()) break;
            launch(b);
            ++next_launch_;
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
        work_[b] = dp_.all_reduce(grads_ + k.begin, k.numel(), dtype_, ReduceOp::sum);
        return;
    }
    // ZeRO: reduce-scatter on the dp group; chunk r of the bucket lands on rank r.
    CActPtr send = grads_ + k.begin;
    if (k.padded(dp_.size())) {
        const ActPtr stage(staging_->data(), dtype_);
        be_.copy(stage, send, size_t(k.numel()) * dtype_size(dtype_));
        zero(stage + k.numel(), k.chunk * dp_.size() - k.numel());
        send = stage;
    }
    const ActPtr recv =
        ActPtr((opt_.zero == ZeroStage::optimizer ? shard_grads_ : shard_recv_)->data(), dtype_) +
        pieces_[b].shard_begin;
    work_[b] = dp_.reduce_scatter(send, recv, k.chunk, dtype_, ReduceOp::sum);
}

void GradSync::launch_remaining() {
    std::vector<size_t> recent;  // launched here, oldest first
    for (; next_launch_ < launch_order_.size(); ++next_launch_) {
        const size_t b = launch_order_[next_launch_];
        LOOM_ASSERT(!launched_[b], "bucket {} launched out of order", b);
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

void GradSync::end_micro_batch(const EmbeddingGradRows& rows) {
    LOOM_CHECK(in_backward_, "GradSync::end_micro_batch without begin_micro_batch");
    if (reducing()) launch_remaining();
    LOOM_CHECK(rows.empty() || (reducing() && sparse_rows_on_),
               "sparse embedding rows on a micro-batch whose gradients are not reduced (only "
               "the last one, or every one under ZeRO-2, may keep rows, after set_sparse_rows)");
    if (reducing() && sparse_rows_on_) exchange_rows(rows);
    if (opt_.zero == ZeroStage::gradients) micro_pending_ = true;
    in_backward_ = false;
}

void GradSync::set_sparse_rows(int64_t begin, int64_t end) {
    LOOM_CHECK(!in_backward_, "GradSync::set_sparse_rows inside a micro-batch");
    LOOM_CHECK(0 <= begin && begin <= end && end <= flat_numel_,
               "sparse rows for [{}, {}) outside the flat buffer of {}", begin, end, flat_numel_);
    LOOM_CHECK(begin == end || (be_.host_addressable() && dtype_ == DType::f32),
               "sparse embedding gradients on {}: the row exchange adds rows on the host",
               be_.name());
    sparse_rows_on_ = begin < end;
    launch_order_.clear();
    for (size_t b = 0; b < buckets_.size(); ++b)
        if (sparse_rows_on_ && buckets_[b].begin >= begin && buckets_[b].end <= end)
            launch_order_.push_back(b);
    for (size_t b = 0; b < buckets_.size(); ++b)
        if (!(sparse_rows_on_ && buckets_[b].begin >= begin && buckets_[b].end <= end))
            launch_order_.push_back(b);
}

void GradSync::exchange_rows(const EmbeddingGradRows& in) {
    LOOM_ASSERT(!rows_.pending, "a second row exchange before the first was added");
    // Every rank of the group takes part, with or without rows of its own: a
    // rank whose micro-batch kept none sends zero rows.
    // The buffers keep their capacity from step to step (fresh pages are slow).
    std::vector<int64_t>& order = rows_.order;
    std::vector<int64_t>& ids = rows_.send_ids;
    std::vector<float>& sums = rows_.send_rows;
    order.clear();
    ids.clear();
    sums.clear();
    for (int64_t k = 0; k < in.count; ++k) {
        const int64_t id = in.ids[k];
        LOOM_CHECK(id >= 0 && id < in.table_rows, "embedding row id {} outside the table of {}", id,
                   in.table_rows);
        if (id != in.padding_idx) order.push_back(k);
    }
    // One row per id, summed in token order (the order the dense scatter adds them).
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return in.ids[a] < in.ids[b]; });
    const int64_t W = in.width;
    for (size_t i = 0; i < order.size(); ++i) {
        const int64_t id = in.ids[order[i]];
        const float* src = in.rows + order[i] * W;
        if (ids.empty() || ids.back() != id) {
            ids.push_back(id);
            sums.insert(sums.end(), src, src + W);
        } else {
            float* dst = sums.data() + (int64_t(ids.size()) - 1) * W;
            for (int64_t j = 0; j < W; ++j) dst[j] += src[j];
        }
    }
    const int dp = dp_.size();
    int64_t n = int64_t(ids.size());
    // The offsets and widths must agree (one model on every rank); the counts
    // may not. Blocking: a few bytes, after the buckets are in flight.
    std::vector<int64_t> meta(size_t(3 * dp));
    const int64_t mine[3] = {n, in.count > 0 ? in.offset : -1, in.count > 0 ? W : -1};
    dp_.all_gather(mine, meta.data(), 3, DType::i64)->wait();
    rows_.counts.assign(size_t(dp), 0);
    rows_.max_rows = 0;
    rows_.offset = rows_.width = -1;
    for (int q = 0; q < dp; ++q) {
        rows_.counts[size_t(q)] = meta[size_t(3 * q)];
        rows_.max_rows = std::max(rows_.max_rows, meta[size_t(3 * q)]);
        const int64_t off = meta[size_t(3 * q + 1)], w = meta[size_t(3 * q + 2)];
        if (off < 0) continue;
        LOOM_CHECK(rows_.offset < 0 || (rows_.offset == off && rows_.width == w),
                   "dp ranks keep embedding rows of different tables (offset {} width {} vs "
                   "offset {} width {})",
                   rows_.offset, rows_.width, off, w);
        rows_.offset = off;
        rows_.width = w;
    }
    if (rows_.max_rows == 0) return;
    const int64_t M = rows_.max_rows, RW = rows_.width;
    ids.resize(size_t(M), -1);  // padding: ids -1, rows of zeros
    sums.resize(size_t(M * RW), 0.0f);
    rows_.recv_ids.resize(size_t(dp * M));
    rows_.recv_rows.resize(size_t(dp * M * RW));
    rows_.ids_work = dp_.all_gather(rows_.send_ids.data(), rows_.recv_ids.data(), M, DType::i64);
    rows_.rows_work =
        dp_.all_gather(rows_.send_rows.data(), rows_.recv_rows.data(), M * RW, DType::f32);
    rows_.pending = true;
}

void GradSync::add_rows() {
    if (!rows_.pending) return;
    const auto t0 = std::chrono::steady_clock::now();
    rows_.ids_work->wait();
    rows_.rows_work->wait();
    rows_.ids_work.reset();
    rows_.rows_work.reset();
    stats_.wait_s += seconds_since(t0);
    rows_.pending = false;
    const int64_t M = rows_.max_rows, W = rows_.width;
    for (int q = 0; q < dp_.size(); ++q) {
        for (int64_t k = 0; k < rows_.counts[size_t(q)]; ++k) {
            const int64_t id = rows_.recv_ids[size_t(q * M + k)];
            const float* src = rows_.recv_rows.data() + (q * M + k) * W;
            const int64_t a = rows_.offset + id * W, b = a + W;
            ++stats_.sparse_rows;
            if (opt_.zero == ZeroStage::none) {
                float* dst = grads_.as<float>() + a;
                for (int64_t j = 0; j < W; ++j) dst[j] += src[j];
                continue;
            }
            // The parts of [a, b) inside this rank's shard pieces.
            auto it =
                std::upper_bound(pieces_by_flat_.begin(), pieces_by_flat_.end(), a,
                                 [&](int64_t x, size_t p) { return x < pieces_[p].flat_begin; });
            if (it != pieces_by_flat_.begin()) --it;
            for (; it != pieces_by_flat_.end() && pieces_[*it].flat_begin < b; ++it) {
                const ShardPiece& p = pieces_[*it];
                const int64_t lo = std::max(a, p.flat_begin), hi = std::min(b, p.flat_end);
                float* dst = shard_grads().as<float>() + p.shard_begin + (lo - p.flat_begin);
                for (int64_t x = lo; x < hi; ++x) dst[x - lo] += src[x - a];
            }
        }
    }
}

void GradSync::collect_micro_batch() {
    wait_all();
    const OpCtx ctx{&be_, dtype_};
    ctx.nn().add_inplace(ctx, shard_grads(), shard_recv_->data(), shard_n_);
    add_rows();
    // The model accumulates (+=) into the flat buffer: the next micro-batch
    // must start from zero, as its gradient is reduced on its own.
    zero(grads_, flat_numel_);
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
        add_rows();
    }
    std::fill(launched_.begin(), launched_.end(), false);
    next_launch_ = 0;
    if (scale != 1.0) {
        if (opt_.zero == ZeroStage::none)
            be_.ops().scale(be_, grads_, dtype_, flat_numel_, float(scale));
        else
            be_.ops().scale(be_, shard_grads(), dtype_, shard_n_, float(scale));
    }
}

}  // namespace loom
