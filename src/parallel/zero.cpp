// ZeroOptimizer: shard segments, sharded update and norm, parameter all-gather,
// checkpoint gather/scatter, and the memory plan.
#include "parallel/zero.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "ops/device_ops.h"

namespace loom {

namespace {

double mib(int64_t bytes) {
    return double(bytes) / double(1 << 20);
}

}  // namespace

std::vector<ShardSegment> shard_segments(const ParamTable& table,
                                         const std::vector<ShardPiece>& pieces, DecayPolicy decay) {
    // Rows sorted by offset, so each piece walks only the rows it overlaps.
    std::vector<int> order;
    for (int i = 0; i < table.size(); ++i)
        if (table.row(i).trainable && table.row(i).numel() > 0) order.push_back(i);
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return table.row(a).offset < table.row(b).offset; });
    std::vector<ShardSegment> out;
    for (const ShardPiece& p : pieces) {
        auto it = std::upper_bound(order.begin(), order.end(), p.flat_begin, [&](int64_t x, int r) {
            return x < table.row(r).offset + table.row(r).numel();
        });
        for (; it != order.end() && table.row(*it).offset < p.flat_end; ++it) {
            const ParamRow& r = table.row(*it);
            const int64_t lo = std::max(p.flat_begin, r.offset);
            const int64_t hi = std::min(p.flat_end, r.offset + r.numel());
            if (lo >= hi) continue;
            out.push_back({lo, p.shard_begin + (lo - p.flat_begin), hi - lo,
                           decay == DecayPolicy::all || r.decay, *it});
        }
    }
    return out;
}

namespace {

const GradSync& checked_sync(const ParamTable& table, const GradSync& sync) {
    LOOM_ASSERT(table.allocated(), "ZeRO over an unallocated parameter table");
    LOOM_CHECK(sync.zero() != ZeroStage::none,
               "a sharded optimizer needs a ZeRO-1 or ZeRO-2 GradSync (got stage none)");
    LOOM_CHECK(
        sync.dtype() == DType::f32 || sync.dtype() == DType::bf16 || sync.dtype() == DType::f16,
        "ZeRO-1/2 with {} gradients: expected fp32, bf16 or fp16", dtype_name(sync.dtype()));
    return sync;
}

// The ranges of `segs` in shard offsets, skipping those inside `exclude`
// (flat ranges; a segment lies inside one row, so it is in or out whole).
std::vector<std::pair<int64_t, int64_t>> kept_shard_ranges(
    const std::vector<ShardSegment>& segs,
    const std::vector<std::pair<int64_t, int64_t>>* exclude) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (const ShardSegment& s : segs) {
        bool skip = false;
        if (exclude)
            for (const auto& [b, e] : *exclude) skip = skip || (s.flat >= b && s.flat < e);
        if (!skip) out.emplace_back(s.shard, s.shard + s.n);
    }
    return out;
}

}  // namespace

ZeroOptimizer::ZeroOptimizer(ParamTable& table, GradSync& sync, const OptimizerConfig& config,
                             Communicator* scalars)
    : table_(table),
      sync_((checked_sync(table, sync), sync)),
      scalars_(scalars ? *scalars : sync.comm()),
      opt_(table, config, optimizer_shard(config.decay)) {}

ZeroOptimizer::ZeroOptimizer(ParamTable& table, GradSync& sync, const AdamWParams& hp,
                             DecayPolicy decay)
    : ZeroOptimizer(table, sync, adamw_config(hp, decay)) {}

OptimizerShard ZeroOptimizer::optimizer_shard(DecayPolicy decay) {
    for (const GradBucket& b : sync_.buckets())
        if (b.padded(sync_.dp_size()))
            staging_ = sync_.backend().alloc(size_t(b.chunk * sync_.dp_size()) * sizeof(float));
    if (sync_.dtype() != DType::f32)
        wide_ = sync_.backend().alloc(size_t(sync_.shard_size()) * sizeof(float));
    OptimizerShard s;
    s.segments = shard_segments(table_, sync_.pieces(), decay);
    s.numel = sync_.shard_size();
    s.grads = grads().as<float>();
    s.all_reduce_sum = [this](double* buf, int64_t n) {
        sync_.comm().all_reduce(buf, n, DType::f64, ReduceOp::sum)->wait();
    };
    s.gather_flat = [this](const float* shard, float* full) { gather_flat(shard, full); };
    return s;
}

double ZeroOptimizer::grad_norm_sq(const std::vector<std::pair<int64_t, int64_t>>* exclude) const {
    const auto ranges = kept_shard_ranges(segments(), exclude);
    std::vector<double> parts(ranges.size());
    Backend& be = sync_.backend();
    be.ops().sum_squares(be, grads(), DType::f32, ranges, parts.data());
    double local = 0;
    for (double p : parts) local += p;
    // Partial sums of all shards, summed on the dp group.
    scalars_.all_reduce(&local, 1, DType::f64, ReduceOp::sum)->wait();
    return local;
}

double ZeroOptimizer::clip_grad_norm(double max_norm) {
    const double total = std::sqrt(grad_norm_sq());
    const double c = max_norm / (total + 1e-6);  // torch clip_grad_norm_
    if (max_norm > 0 && c < 1.0) {
        Backend& be = sync_.backend();
        for (const ShardSegment& s : segments())
            be.ops().scale(be, grads() + s.shard, DType::f32, s.n, float(c));
    }
    return total;
}

void ZeroOptimizer::take_grads() {
    if (!wide_) return;
    Backend& be = sync_.backend();
    be.ops().convert(be, wide_->data(), DType::f32, sync_.shard_grads(), sync_.dtype(),
                     sync_.shard_size());
}

void ZeroOptimizer::scale_grads(float s) {
    Backend& be = sync_.backend();
    be.ops().scale(be, grads(), DType::f32, sync_.shard_size(), s);
}

void ZeroOptimizer::step(double lr) {
    opt_.step(lr);
    Backend& be = sync_.backend();
    float* p = table_.device_master();
    // All-gather on the dp group: every rank's updated chunks into every
    // rank's parameter buffer. The send side is a copy (MPI forbids a send
    // buffer inside the receive buffer), staged in the fp32 gradient shard,
    // which this step has consumed (begin_step clears it).
    Communicator& dp = sync_.comm();
    float* send_base = grads().as<float>();
    float* stage = staging_ ? static_cast<float*>(staging_->data()) : nullptr;
    const auto& buckets = sync_.buckets();
    const auto& pieces = sync_.pieces();
    std::vector<WorkPtr> work;
    work.reserve(buckets.size());
    for (size_t b = 0; b < buckets.size(); ++b) {
        const ShardPiece& pc = pieces[b];
        float* send = send_base + pc.shard_begin;
        const int64_t valid = pc.flat_end - pc.flat_begin;
        be.copy(send, p + pc.flat_begin, size_t(valid) * sizeof(float));
        be.zero(send + valid, size_t(pc.chunk - valid) * sizeof(float));
        float* recv = buckets[b].padded(dp.size()) ? stage : p + buckets[b].begin;
        work.push_back(dp.all_gather(send, recv, pc.chunk, DType::f32));
    }
    for (size_t b = 0; b < buckets.size(); ++b) {
        work[b]->wait();
        if (buckets[b].padded(dp.size()))
            be.copy(p + buckets[b].begin, stage, size_t(buckets[b].numel()) * sizeof(float));
    }
    table_.refresh_copy();
}

void ZeroOptimizer::gather_flat(const float* shard, float* full) const {
    Communicator& dp = sync_.comm();
    const auto& buckets = sync_.buckets();
    const auto& pieces = sync_.pieces();
    Backend& be = sync_.backend();
    float* stage = staging_ ? static_cast<float*>(staging_->data()) : nullptr;
    // One bucket at a time: the padded bottom bucket shares the staging buffer.
    for (size_t b = 0; b < buckets.size(); ++b) {
        const bool padded = buckets[b].padded(dp.size());
        float* recv = padded ? stage : full + buckets[b].begin;
        dp.all_gather(shard + pieces[b].shard_begin, recv, pieces[b].chunk, DType::f32)->wait();
        if (padded)
            be.copy(full + buckets[b].begin, stage, size_t(buckets[b].numel()) * sizeof(float));
    }
}

int64_t DpMemoryPlan::total_bytes() const {
    return param_bytes + grad_bytes + grad_shard_bytes + optimizer_bytes + comm_bytes;
}

DpMemoryPlan dp_memory_plan(int64_t flat_numel, int64_t bucket_elems, int dp_size, ZeroStage zero,
                            bool moments, DType grads, bool compute_copy) {
    const auto buckets = grad_buckets_plan(flat_numel, bucket_elems, dp_size);
    const int64_t g = int64_t(dtype_size(grads)), f = int64_t(sizeof(float));
    const bool narrow = grads != DType::f32;
    const int64_t n_shard = shard_numel(buckets);
    int64_t staged = 0;  // elements of the padded bottom bucket's staging
    for (const GradBucket& b : buckets)
        if (b.padded(dp_size)) staged = b.chunk * dp_size;
    DpMemoryPlan m;
    m.zero = zero;
    m.dp_size = dp_size;
    m.param_bytes = flat_numel * f + (compute_copy ? flat_numel * g : 0);
    m.grad_bytes = flat_numel * g;
    // The sync's shard (and ZeRO-2's receive buffer) in the gradients' type;
    // narrow ones widened once to fp32 for the norm and the update.
    const int64_t shard = n_shard * g, wide = narrow ? n_shard * f : 0;
    const int64_t full_moments = 2 * flat_numel * f;
    switch (zero) {
        case ZeroStage::none:
            m.optimizer_bytes = full_moments;
            break;
        case ZeroStage::optimizer:
            m.grad_shard_bytes = shard + wide;
            m.optimizer_bytes = 2 * n_shard * f;
            m.comm_bytes = staged * (g + f);  // padded bottom bucket: grads, fp32 params
            break;
        case ZeroStage::gradients:
            m.grad_shard_bytes = 2 * shard + wide;  // + the per-micro-batch receive buffer
            m.optimizer_bytes = 2 * n_shard * f;
            m.comm_bytes = staged * (g + f);
            break;
    }
    if (!moments) m.optimizer_bytes = 0;
    // DDP holds parameters, gradients and (with moments) the whole state.
    m.saved_vs_ddp_bytes =
        m.param_bytes + m.grad_bytes + (moments ? full_moments : 0) - m.total_bytes();
    return m;
}

std::string DpMemoryPlan::describe() const {
    std::string s = fmt::format("{} dp {}: params {:.1f} MiB, grads {:.1f} MiB",
                                zero == ZeroStage::none        ? "DDP"
                                : zero == ZeroStage::optimizer ? "ZeRO-1"
                                                               : "ZeRO-2",
                                dp_size, mib(param_bytes), mib(grad_bytes));
    if (grad_shard_bytes) s += fmt::format(" + shard {:.1f} MiB", mib(grad_shard_bytes));
    s += fmt::format(", optimizer {:.1f} MiB", mib(optimizer_bytes));
    if (comm_bytes) s += fmt::format(", buffers {:.1f} MiB", mib(comm_bytes));
    s += fmt::format("; total {:.1f} MiB per rank", mib(total_bytes()));
    if (zero != ZeroStage::none)
        s += fmt::format(" ({} {:.1f} MiB vs DDP)", saved_vs_ddp_bytes >= 0 ? "saves" : "costs",
                         mib(std::abs(saved_vs_ddp_bytes)));
    if (zero == ZeroStage::gradients)
        s += "; the flat gradient buffer stays allocated as backward's workspace";
    return s;
}

}  // namespace loom
