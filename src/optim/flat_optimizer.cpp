// FlatOptimizer: the update plan (merged runs, LAMB tiles), the state on the
// backend, the shard, and the layout-free checkpoint form.
#include "optim/flat_optimizer.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "ops/lamb_tiles.h"
#include "optim/moment_state.h"

namespace loom {

namespace {

std::shared_ptr<Storage> alloc_floats(Backend& be, int64_t n) {
    return be.alloc(size_t(std::max<int64_t>(n, 1)) * sizeof(float));
}

template <typename T>
std::shared_ptr<Storage> upload(Backend& be, const std::vector<T>& host) {
    auto s = be.alloc(std::max<size_t>(host.size(), 1) * sizeof(T));
    be.to_device(s->data(), host.data(), host.size() * sizeof(T));
    return s;
}

float* floats(const std::shared_ptr<Storage>& s) {
    return s ? static_cast<float*>(s->data()) : nullptr;
}

}  // namespace

FlatOptimizer::FlatOptimizer(Backend& backend, const ParamTable& table,
                             const OptimizerConfig& config, const UpdateBuffers& target,
                             std::optional<OptimizerShard> shard)
    : backend_(backend), table_(table), config_(config), target_(target) {
    LOOM_ASSERT(table.allocated(), "an optimizer over an unallocated parameter table");
    const AdamWParams& hp = config.hp;
    const char* name = config.kind == OptimizerKind::lamb  ? "lamb"
                       : config.kind == OptimizerKind::sgd ? "sgd"
                                                           : "adamw";
    if (has_moments()) {
        LOOM_CHECK(hp.beta1 >= 0 && hp.beta1 < 1 && hp.beta2 >= 0 && hp.beta2 < 1,
                   "{}: betas must be in [0, 1), got ({}, {})", name, hp.beta1, hp.beta2);
        LOOM_CHECK(hp.eps > 0, "{}: epsilon must be positive, got {}", name, hp.eps);
    }
    LOOM_CHECK(config.kind != OptimizerKind::sgd || hp.weight_decay >= 0,
               "sgd: weight_decay must be >= 0, got {}", hp.weight_decay);
    target_.m = target_.v = nullptr;
    if (shard) {
        check_shard(*shard);
        state_n_ = has_moments() ? shard->numel : 0;
        if (has_moments()) {
            m_ = alloc_floats(backend_, state_n_);
            v_ = alloc_floats(backend_, state_n_);
        }
        std::vector<ShardSegment> segs = shard->segments;
        shard_ = std::move(shard);
        plan(std::move(segs));
        return;
    }
    // The whole buffer: one segment per trainable row. Frozen rows (and rows
    // another pipeline stage holds) get none; the state covers the span from
    // the first trainable row to the end of the last, state offset = flat
    // offset - state_base_.
    std::vector<ShardSegment> segs;
    int64_t lo = table.flat_numel(), hi = 0;
    for (int i = 0; i < table.size(); ++i) {
        const ParamRow& r = table.row(i);
        if (!r.trainable || !r.local || r.numel() == 0) continue;
        segs.push_back(
            {r.offset, r.offset, r.numel(), config.decay == DecayPolicy::all || r.decay, i});
        lo = std::min(lo, r.offset);
        hi = std::max(hi, r.offset + r.numel());
    }
    state_base_ = segs.empty() ? 0 : lo;
    for (ShardSegment& s : segs) s.shard -= state_base_;
    state_n_ = has_moments() && !segs.empty() ? hi - lo : 0;
    if (has_moments()) {
        m_ = alloc_floats(backend_, state_n_);
        v_ = alloc_floats(backend_, state_n_);
        backend_.zero(m_->data(), size_t(std::max<int64_t>(state_n_, 1)) * sizeof(float));
        backend_.zero(v_->data(), size_t(std::max<int64_t>(state_n_, 1)) * sizeof(float));
    }
    plan(std::move(segs));
}

FlatOptimizer::FlatOptimizer(ParamTable& table, const OptimizerConfig& config,
                             std::optional<OptimizerShard> shard)
    : FlatOptimizer(table.backend(), table, config, table.update_buffers(), std::move(shard)) {}

void FlatOptimizer::plan(std::vector<ShardSegment> segs) {
    segments_ = std::move(segs);
    // Elementwise kernels: neighbouring segments with one decay flag merge
    // into one run. On the whole buffer the alignment gap between two rows
    // merges too (zero params and grads, which the update leaves at zero); a
    // shard's segments merge only when contiguous in both buffers.
    runs_.clear();
    const bool whole = !shard_.has_value();
    int last_row = -1;
    for (const ShardSegment& s : segments_) {
        if (!runs_.empty()) {
            UpdateRun& b = runs_.back();
            const bool adjacent_rows = whole && s.row == last_row + 1;
            const bool contiguous =
                b.param_offset + b.n == s.flat && b.state_offset + b.n == s.shard;
            // Across the gap between adjacent rows only when the state has it too.
            const bool same_gap = s.flat - b.param_offset == s.shard - b.state_offset;
            if (b.decay == s.decay && ((adjacent_rows && same_gap) || contiguous)) {
                b.n = s.flat + s.n - b.param_offset;
                last_row = s.row;
                continue;
            }
        }
        runs_.push_back({s.flat, s.shard, s.n, s.decay});
        last_row = s.row;
    }
    if (config_.kind != OptimizerKind::lamb) return;
    // LAMB's norms are per tensor: one piece per segment, tiled by row.
    std::vector<LambPiece> pieces;
    for (const ShardSegment& s : segments_)
        pieces.push_back({s.flat, s.shard, s.n, int32_t(s.row), s.decay});
    const int32_t rows = int32_t(table_.size());
    const LambTiles t = lamb_tiles_plan(pieces, rows);
    n_tiles_ = int64_t(t.tiles.size());
    tiles_ = upload(backend_, t.tiles);
    row_begin_ = upload(backend_, t.row_begin);
    tile_sums_ = backend_.alloc(size_t(std::max<int64_t>(2 * n_tiles_, 1)) * sizeof(double));
    row_sums_ = backend_.alloc(size_t(std::max<int32_t>(2 * rows, 1)) * sizeof(double));
}

UpdateBuffers FlatOptimizer::buffers() const {
    UpdateBuffers b = target_;
    b.m = floats(m_);
    b.v = floats(v_);
    if (shard_) {
        b.grad = shard_->grads;
        b.grad_dtype = DType::f32;
        b.copy = nullptr;  // the caller's all-gather refreshes every piece
    } else if (b.grad != nullptr) {
        // The kernels index gradients like the state (a shard's layout): the
        // whole buffer's gradients from the state's first element on.
        b.grad = static_cast<const char*>(b.grad) + size_t(state_base_) * dtype_size(b.grad_dtype);
    }
    return b;
}

void FlatOptimizer::step(double lr, float grad_scale) {
    ++step_;
    const UpdateBuffers b = buffers();
    const DeviceOps& ops = backend_.ops();
    const AdamWParams& hp = config_.hp;
    switch (config_.kind) {
        case OptimizerKind::adamw: {
            AdamWParams h = hp;
            h.lr = lr;
            ops.adamw(backend_, b, runs_, h, step_, grad_scale);
            break;
        }
        case OptimizerKind::sgd:
            ops.sgd(backend_, b, runs_, lr, hp.weight_decay, grad_scale);
            break;
        case OptimizerKind::lamb: {
            const LambStep ls = lamb_step_constants(hp.beta1, hp.beta2, hp.eps, hp.weight_decay,
                                                    config_.lamb_bias_correction, step_);
            LambPlanView p;
            p.tiles = static_cast<const LambTile*>(tiles_->data());
            p.n_tiles = n_tiles_;
            p.row_begin = static_cast<const int64_t*>(row_begin_->data());
            p.rows = int32_t(table_.size());
            p.tile_sums = static_cast<double*>(tile_sums_->data());
            p.row_sums = static_cast<double*>(row_sums_->data());
            ops.lamb_moments(backend_, b, p, ls, grad_scale);
            // Each rank holds some elements of a tensor: the whole tensor's
            // sums are the sum of every rank's.
            if (shard_) shard_->all_reduce_sum(p.row_sums, 2 * int64_t(p.rows));
            ops.lamb_apply(backend_, b, p, ls, lr);
            break;
        }
    }
}

void FlatOptimizer::check_shard(const OptimizerShard& shard) const {
    LOOM_CHECK(shard.numel >= 0 && (shard.grads != nullptr || shard.numel == 0),
               "set_shard: a shard of {} elements without a gradient buffer", shard.numel);
    LOOM_CHECK(config_.kind != OptimizerKind::lamb || shard.all_reduce_sum,
               "set_shard: LAMB on a shard needs the dp all-reduce of its row sums");
    for (const ShardSegment& s : shard.segments)
        LOOM_CHECK(s.n >= 0 && s.flat >= 0 && s.flat + s.n <= table_.flat_numel() && s.shard >= 0 &&
                       s.shard + s.n <= shard.numel,
                   "set_shard: segment [{}, +{}) at shard offset {} outside the buffers", s.flat,
                   s.n, s.shard);
}

void FlatOptimizer::set_shard(OptimizerShard shard) {
    LOOM_CHECK(!shard_.has_value(), "the optimizer is sharded already");
    check_shard(shard);
    if (has_moments()) {
        // Keep this rank's part of the state, at its shard offsets.
        auto m = alloc_floats(backend_, shard.numel), v = alloc_floats(backend_, shard.numel);
        for (const ShardSegment& s : shard.segments) {
            const size_t bytes = size_t(s.n) * sizeof(float);
            backend_.copy(floats(m) + s.shard, floats(m_) + (s.flat - state_base_), bytes);
            backend_.copy(floats(v) + s.shard, floats(v_) + (s.flat - state_base_), bytes);
        }
        m_ = std::move(m);
        v_ = std::move(v);
        state_n_ = shard.numel;
    }
    state_base_ = 0;
    std::vector<ShardSegment> segs = shard.segments;
    shard_ = std::move(shard);
    plan(std::move(segs));
}

std::map<std::string, Tensor> FlatOptimizer::state_tensors() const {
    if (!has_moments()) return {};  // SGD: the step count only
    if (backend_.device() == Device::cpu && !shard_)
        return moment_state_tensors(table_, m_, v_, state_base_);
    const int64_t flat = table_.flat_numel();
    const size_t bytes = size_t(std::max<int64_t>(flat, 1)) * sizeof(float);
    std::shared_ptr<Storage> host[2] = {Storage::alloc(bytes, false), Storage::alloc(bytes, false)};
    const std::shared_ptr<Storage>* src[2] = {&m_, &v_};
    for (int k = 0; k < 2; ++k) {
        const float* full = floats(*src[k]);
        if (!shard_) {
            std::memset(host[k]->data(), 0, bytes);
            backend_.to_host(floats(host[k]) + state_base_, full, size_t(state_n_) * sizeof(float));
            continue;
        }
        std::shared_ptr<Storage> gathered = alloc_floats(backend_, flat);
        shard_->gather_flat(full, floats(gathered));
        backend_.to_host(host[k]->data(), floats(gathered), size_t(flat) * sizeof(float));
    }
    return moment_state_tensors(table_, host[0], host[1]);
}

void FlatOptimizer::load_state(const std::map<std::string, Tensor>& state, int64_t step) {
    LOOM_CHECK(step >= 0, "optimizer state: negative step {}", step);
    if (!has_moments()) {
        LOOM_CHECK(state.empty(),
                   "sgd: the checkpoint holds optimizer state ({} ...): it was saved by another "
                   "optimizer (hyperparameters.optim must match the checkpoint's)",
                   state.empty() ? "" : state.begin()->first);
        step_ = step;
        return;
    }
    const int64_t flat = table_.flat_numel();
    const size_t bytes = size_t(std::max<int64_t>(flat, 1)) * sizeof(float);
    auto hm = Storage::alloc(bytes), hv = Storage::alloc(bytes);
    load_moment_state(table_, state, *hm, *hv, "optimizer");
    const float* src[2] = {floats(hm), floats(hv)};
    float* dst[2] = {floats(m_), floats(v_)};
    for (int k = 0; k < 2; ++k) {
        if (!shard_) {
            backend_.to_device(dst[k], src[k] + state_base_, size_t(state_n_) * sizeof(float));
            continue;
        }
        backend_.zero(dst[k], size_t(std::max<int64_t>(state_n_, 1)) * sizeof(float));
        for (const ShardSegment& s : segments_)
            backend_.to_device(dst[k] + s.shard, src[k] + s.flat, size_t(s.n) * sizeof(float));
    }
    backend_.synchronize();  // the host copies go out of scope
    step_ = step;
}

std::vector<double> FlatOptimizer::lamb_row_sums() const {
    if (config_.kind != OptimizerKind::lamb) return {};
    std::vector<double> out(size_t(2 * table_.size()));
    backend_.to_host(out.data(), row_sums_->data(), out.size() * sizeof(double));
    return out;
}

}  // namespace loom
