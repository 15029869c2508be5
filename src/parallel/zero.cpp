// ZeroAdamW: shard segments, sharded update and norm, parameter all-gather,
// checkpoint gather/scatter, and the memory plan.
#include "parallel/zero.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "ops/adamw.h"

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

ZeroAdamW::ZeroAdamW(ParamTable& table, GradSync& sync, const AdamWParams& hp, DecayPolicy decay)
    : table_(table), sync_(sync), hp_(hp) {
    LOOM_ASSERT(table.allocated(), "ZeroAdamW over an unallocated parameter table");
    LOOM_CHECK(sync.zero() != ZeroStage::none,
               "ZeroAdamW needs a ZeRO-1 or ZeRO-2 GradSync (got stage none)");
    segments_ = shard_segments(table, sync.pieces(), decay);
    for (const ShardSegment& s : segments_) runs_.push_back({s.flat, s.shard, s.n, s.decay});
    const size_t n = size_t(sync.shard_size());
    m_.assign(n, 0.0f);
    v_.assign(n, 0.0f);
    for (const GradBucket& b : sync.buckets())
        if (b.padded(sync.dp_size())) staging_.assign(size_t(b.chunk * sync.dp_size()), 0.0f);
}

double ZeroAdamW::grad_norm_sq(const std::vector<std::pair<int64_t, int64_t>>* exclude) const {
    const float* g = sync_.shard_grads();
    double local = 0;
    for (const ShardSegment& s : segments_) {
        // A segment lies inside one row, so it is either in an excluded row or not.
        bool skip = false;
        if (exclude)
            for (const auto& [b, e] : *exclude) skip = skip || (s.flat >= b && s.flat < e);
        if (skip) continue;
        double part = 0;
        for (int64_t i = 0; i < s.n; ++i) part += double(g[s.shard + i]) * double(g[s.shard + i]);
        local += part;
    }
    // Partial sums of all shards, summed on the dp group.
    sync_.comm().all_reduce(&local, 1, DType::f64, ReduceOp::sum)->wait();
    return local;
}

double ZeroAdamW::clip_grad_norm(double max_norm) {
    const double total = std::sqrt(grad_norm_sq());
    const double c = max_norm / (total + 1e-6);  // torch clip_grad_norm_
    if (max_norm > 0 && c < 1.0) {
        const float f = float(c);
        float* g = sync_.shard_grads();
        for (const ShardSegment& s : segments_)
            for (int64_t i = 0; i < s.n; ++i) g[s.shard + i] *= f;
    }
    return total;
}

void ZeroAdamW::step(double lr) {
    ++step_;
    float* p = table_.params_data();
    const float* g = sync_.shard_grads();
    AdamWParams h = hp_;
    h.lr = lr;
    adamw_update_runs(p, g, m_.data(), v_.data(), runs_, h, step_);
    // All-gather on the dp group: every rank's updated chunks into every
    // rank's parameter buffer. The send side is a copy (MPI forbids a send
    // buffer inside the receive buffer), staged in the gradient shard, which
    // this step has consumed (begin_step clears it).
    Communicator& dp = sync_.comm();
    float* send_base = sync_.shard_grads();
    const auto& buckets = sync_.buckets();
    const auto& pieces = sync_.pieces();
    std::vector<WorkPtr> work;
    work.reserve(buckets.size());
    for (size_t b = 0; b < buckets.size(); ++b) {
        const ShardPiece& pc = pieces[b];
        float* send = send_base + pc.shard_begin;
        const int64_t valid = pc.flat_end - pc.flat_begin;
        std::memcpy(send, p + pc.flat_begin, size_t(valid) * sizeof(float));
        std::fill(send + valid, send + pc.chunk, 0.0f);
        float* recv = buckets[b].padded(dp.size()) ? staging_.data() : p + buckets[b].begin;
        work.push_back(dp.all_gather(send, recv, pc.chunk, DType::f32));
    }
    for (size_t b = 0; b < buckets.size(); ++b) {
        work[b]->wait();
        if (buckets[b].padded(dp.size()))
            std::memcpy(p + buckets[b].begin, staging_.data(),
                        size_t(buckets[b].numel()) * sizeof(float));
    }
}

std::vector<float> ZeroAdamW::gather_flat(const std::vector<float>& shard) const {
    Communicator& dp = sync_.comm();
    const auto& buckets = sync_.buckets();
    const auto& pieces = sync_.pieces();
    std::vector<float> full(size_t(table_.flat_numel()), 0.0f);
    // One bucket at a time: the padded bottom bucket shares the staging buffer.
    for (size_t b = 0; b < buckets.size(); ++b) {
        const bool padded = buckets[b].padded(dp.size());
        float* recv = padded ? staging_.data() : full.data() + buckets[b].begin;
        dp.all_gather(shard.data() + pieces[b].shard_begin, recv, pieces[b].chunk, DType::f32)
            ->wait();
        if (padded)
            std::memcpy(full.data() + buckets[b].begin, staging_.data(),
                        size_t(buckets[b].numel()) * sizeof(float));
    }
    return full;
}

std::map<std::string, Tensor> ZeroAdamW::gather_state() const {
    const std::vector<float> m = gather_flat(m_);
    const std::vector<float> v = gather_flat(v_);
    std::map<std::string, Tensor> out;
    for (const ParamRow& r : table_.rows()) {
        if (!r.trainable) continue;
        for (const auto& [kind, src] : {std::pair{"exp_avg.", &m}, std::pair{"exp_avg_sq.", &v}}) {
            const std::string name = kind + r.name;
            Tensor t = Tensor::empty(DType::f32, r.shape, name);
            std::memcpy(t.raw(), src->data() + r.offset, size_t(r.numel()) * sizeof(float));
            out[name] = t;
        }
    }
    return out;
}

void ZeroAdamW::load_state(const std::map<std::string, Tensor>& state, int64_t step) {
    LOOM_CHECK(step >= 0, "optimizer state: negative step {}", step);
    // Row index -> tensors, checked before anything is copied.
    std::map<int, std::pair<const Tensor*, const Tensor*>> found;
    for (int i = 0; i < table_.size(); ++i) {
        const ParamRow& r = table_.row(i);
        if (!r.trainable) continue;
        const Tensor* ts[2] = {nullptr, nullptr};
        const char* kinds[2] = {"exp_avg.", "exp_avg_sq."};
        for (int k = 0; k < 2; ++k) {
            const std::string key = kinds[k] + r.name;
            auto it = state.find(key);
            LOOM_CHECK(it != state.end(), "optimizer state: missing tensor '{}'", key);
            LOOM_CHECK(it->second.dtype == DType::f32 && it->second.shape == r.shape,
                       "optimizer state: tensor '{}' is {} {}, expected F32 {}", key,
                       dtype_safetensors_name(it->second.dtype), it->second.shape.to_string(),
                       r.shape.to_string());
            ts[k] = &it->second;
        }
        found[i] = {ts[0], ts[1]};
    }
    std::fill(m_.begin(), m_.end(), 0.0f);
    std::fill(v_.begin(), v_.end(), 0.0f);
    // Each segment lies inside one row: copy its slice of that row's tensors.
    for (const ShardSegment& s : segments_) {
        int row = -1;
        for (const auto& [i, ts] : found) {
            const ParamRow& r = table_.row(i);
            if (s.flat >= r.offset && s.flat + s.n <= r.offset + r.numel()) {
                row = i;
                break;
            }
        }
        LOOM_ASSERT(row >= 0, "shard segment at {} outside every trainable row", s.flat);
        const int64_t in_row = s.flat - table_.row(row).offset;
        const auto [tm, tv] = found[row];
        std::memcpy(m_.data() + s.shard, tm->data<float>() + in_row, size_t(s.n) * sizeof(float));
        std::memcpy(v_.data() + s.shard, tv->data<float>() + in_row, size_t(s.n) * sizeof(float));
    }
    step_ = step;
}

int64_t DpMemoryPlan::total_bytes() const {
    return param_bytes + grad_bytes + grad_shard_bytes + optimizer_bytes + comm_bytes;
}

DpMemoryPlan dp_memory_plan(int64_t flat_numel, int64_t bucket_elems, int dp_size, ZeroStage zero) {
    const auto buckets = grad_buckets_plan(flat_numel, bucket_elems, dp_size);
    const int64_t F = flat_numel * int64_t(sizeof(float));
    const int64_t S = shard_numel(buckets) * int64_t(sizeof(float));
    int64_t staging = 0;
    for (const GradBucket& b : buckets)
        if (b.padded(dp_size)) staging = b.chunk * dp_size * int64_t(sizeof(float));
    DpMemoryPlan m;
    m.zero = zero;
    m.dp_size = dp_size;
    m.param_bytes = F;
    m.grad_bytes = F;
    switch (zero) {
        case ZeroStage::none:
            m.optimizer_bytes = 2 * F;
            break;
        case ZeroStage::optimizer:
            m.grad_shard_bytes = S;
            m.optimizer_bytes = 2 * S;
            m.comm_bytes = 2 * staging;  // padded bottom bucket: grads, params
            break;
        case ZeroStage::gradients:
            m.grad_shard_bytes = 2 * S;  // accumulated shard + per-micro-batch receive buffer
            m.optimizer_bytes = 2 * S;
            m.comm_bytes = 2 * staging;
            break;
    }
    m.saved_vs_ddp_bytes = 4 * F - m.total_bytes();
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
