// CudaExecutor: the optimizer step (AdamW, LAMB or SGD, CudaModelOptions::
// optimizer) over the whole flat buffer or, under ZeRO-1/2, over this rank's
// shard (set_shard), plus the gradient norm (whole or outside excluded flat
// ranges, over the flat buffer or the shard) and the layout-free state.
//
// Whole buffer: the update reads the compute-type gradients and refreshes the
// compute copy in the same pass. Shard: it reads the fp32 reduced gradient
// shard, updates only this rank's pieces of the master weights (state indexed
// by shard offset), then the sync's gather_params all-gathers the master
// weights over dp and the compute copy is refreshed from them. LAMB's
// per-tensor norms are partial on a shard: their per-row sums are summed over
// dp (all_reduce_sum) between the two passes, so every rank applies each
// tensor's whole trust ratio. AdamW and SGD are elementwise: the shard update
// is bitwise the unsharded one for the same gradients.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "core/check.h"
#include "models/cuda/cuda_executor.h"
#include "ops/cuda/adamw_cuda.h"
#include "ops/cuda/elementwise_cuda.h"
#include "ops/cuda/lamb_cuda.h"
#include "ops/cuda/sgd_cuda.h"
#include "optim/moment_state.h"
#include "parallel/norm_ranges.h"

namespace loom {

namespace {

template <typename U>
U* alloc_zeroed(int64_t n) {
    void* p = nullptr;
    LOOM_CUDA_CHECK(cudaMalloc(&p, size_t(std::max<int64_t>(n, 1)) * sizeof(U)));
    LOOM_CUDA_CHECK(cudaMemset(p, 0, size_t(std::max<int64_t>(n, 1)) * sizeof(U)));
    return static_cast<U*>(p);
}

template <typename U>
void free_and_null(U*& p) {
    if (p) (void)cudaFree(p);
    p = nullptr;
}

bool has_moments(OptimizerKind o) {
    return o != OptimizerKind::sgd;
}

}  // namespace

template <typename T>
void CudaExecutor<T>::optim_setup() {
    LOOM_CHECK(options_.adamw.beta1 >= 0 && options_.adamw.beta1 < 1 && options_.adamw.beta2 >= 0 &&
                   options_.adamw.beta2 < 1,
               "optimizer betas must be in [0, 1), got ({}, {})", options_.adamw.beta1,
               options_.adamw.beta2);
    LOOM_CHECK(options_.optimizer != OptimizerKind::sgd || options_.adamw.weight_decay >= 0,
               "sgd: weight_decay must be >= 0, got {}", options_.adamw.weight_decay);
    state_n_ = has_moments(options_.optimizer) ? flat_ : 0;
    if (state_n_ > 0) {
        m_ = alloc_zeroed<float>(state_n_);
        v_ = alloc_zeroed<float>(state_n_);
    }
    // The whole buffer: per trainable row (this rank's rows), state offset =
    // flat offset.
    std::vector<ShardSegment> segs;
    for (int i = 0; i < table_.size(); ++i) {
        const ParamRow& r = table_.row(i);
        if (!r.trainable || !r.local || r.numel() == 0) continue;
        segs.push_back({r.offset, r.offset, r.numel(), options_.decay_all || r.decay, i});
    }
    plan_update(std::move(segs));
}

template <typename T>
void CudaExecutor<T>::optim_release() {
    free_and_null(m_);
    free_and_null(v_);
    free_and_null(lamb_tiles_);
    free_and_null(lamb_row_begin_);
    free_and_null(lamb_tile_sums_);
    free_and_null(lamb_row_sums_);
}

template <typename T>
void CudaExecutor<T>::plan_update(std::vector<ShardSegment> segs) {
    if (options_.optimizer == OptimizerKind::lamb) {
        // LAMB's norms are per tensor: one piece per segment, never merged.
        std::vector<LambPiece> pieces;
        for (const ShardSegment& s : segs)
            pieces.push_back({s.flat, s.shard, s.n, int32_t(s.row), s.decay});
        const LambTiles plan = lamb_tiles_plan(pieces, int32_t(table_.size()));
        free_and_null(lamb_tiles_);
        free_and_null(lamb_row_begin_);
        free_and_null(lamb_tile_sums_);
        free_and_null(lamb_row_sums_);
        lamb_n_tiles_ = int64_t(plan.tiles.size());
        lamb_tiles_ = alloc_zeroed<LambTile>(lamb_n_tiles_);
        lamb_row_begin_ = alloc_zeroed<int64_t>(int64_t(plan.row_begin.size()));
        lamb_tile_sums_ = alloc_zeroed<double>(2 * lamb_n_tiles_);
        lamb_row_sums_ = alloc_zeroed<double>(2 * int64_t(table_.size()));
        if (lamb_n_tiles_ > 0)
            LOOM_CUDA_CHECK(cudaMemcpy(lamb_tiles_, plan.tiles.data(),
                                       plan.tiles.size() * sizeof(LambTile),
                                       cudaMemcpyHostToDevice));
        LOOM_CUDA_CHECK(cudaMemcpy(lamb_row_begin_, plan.row_begin.data(),
                                   plan.row_begin.size() * sizeof(int64_t),
                                   cudaMemcpyHostToDevice));
    }
    // Elementwise optimizers: neighbouring runs with one decay flag merged
    // into one kernel call. On the whole buffer the gap between two aligned
    // rows is merged too (zero params and grads, which stay zero), as the
    // CPU AdamW does; a shard's segments merge only when contiguous in both
    // the flat buffer and the shard.
    segments_.clear();
    const bool whole = !shard_.has_value();
    for (const ShardSegment& s : segs) {
        if (!segments_.empty()) {
            ShardSegment& b = segments_.back();
            const bool adjacent_rows = whole && b.row >= 0 && s.row == b.row + 1;
            const bool contiguous = b.flat + b.n == s.flat && b.shard + b.n == s.shard;
            if (b.decay == s.decay && (adjacent_rows || contiguous)) {
                b.n = s.flat + s.n - b.flat;
                b.row = s.row;
                continue;
            }
        }
        segments_.push_back(s);
    }
}

template <typename T>
void CudaExecutor<T>::set_shard(CudaShard shard) {
    check_owner("set_shard");
    if (!shard.all_reduce_sum || !shard.gather_params || !shard.gather_flat) {
        // The sync that owned the collectives is being destroyed.
        shard_detached_ = shard_.has_value();
        shard_.reset();
        return;
    }
    LOOM_CHECK(!shard_.has_value() && !shard_detached_,
               "the CUDA executor's optimizer is sharded already");
    LOOM_CHECK(shard.numel >= 0 && (shard.grads != nullptr || shard.numel == 0),
               "set_shard: a shard of {} elements without a gradient buffer", shard.numel);
    std::vector<ShardPiece> pieces;
    for (const CudaShard::Chunk& c : shard.chunks) {
        LOOM_CHECK(c.flat_begin >= 0 && c.flat_end >= c.flat_begin && c.flat_end <= flat_ &&
                       c.shard_begin >= 0 &&
                       c.shard_begin + (c.flat_end - c.flat_begin) <= shard.numel,
                   "set_shard: chunk [{}, {}) at shard offset {} outside the buffers", c.flat_begin,
                   c.flat_end, c.shard_begin);
        ShardPiece p;
        p.flat_begin = c.flat_begin;
        p.flat_end = c.flat_end;
        p.shard_begin = c.shard_begin;
        p.chunk = c.flat_end - c.flat_begin;
        pieces.push_back(p);
    }
    std::vector<ShardSegment> segs;
    for (const ShardSegment& s :
         shard_segments(table_, pieces, options_.decay_all ? DecayPolicy::all : DecayPolicy::table))
        if (table_.row(s.row).local) segs.push_back(s);
    // The state shrinks to the shard, keeping this rank's part of it.
    if (has_moments(options_.optimizer)) {
        float* m = alloc_zeroed<float>(shard.numel);
        float* v = alloc_zeroed<float>(shard.numel);
        for (const ShardSegment& s : segs) {
            LOOM_CUDA_CHECK(cudaMemcpy(m + s.shard, m_ + s.flat, size_t(s.n) * sizeof(float),
                                       cudaMemcpyDeviceToDevice));
            LOOM_CUDA_CHECK(cudaMemcpy(v + s.shard, v_ + s.flat, size_t(s.n) * sizeof(float),
                                       cudaMemcpyDeviceToDevice));
        }
        free_and_null(m_);
        free_and_null(v_);
        m_ = m;
        v_ = v;
        state_n_ = shard.numel;
    }
    shard_ = std::move(shard);
    plan_update(std::move(segs));
}

template <typename T>
void CudaExecutor<T>::check_shard_attached() const {
    LOOM_CHECK(!shard_detached_,
               "the CUDA executor's optimizer is sharded, and its data-parallel gradient sync is "
               "gone: there is no shard to update");
}

template <typename T>
double CudaExecutor<T>::grad_norm_sq() {
    check_shard_attached();
    if (shard_) {
        // Partial sums over this rank's shard (frozen rows and padding hold
        // zeros), summed over dp on the device.
        sum_squares_cuda<float>(shard_->grads, shard_->numel, norm_result_, ctx_);
        shard_->all_reduce_sum(norm_result_, 1);
    } else {
        sum_squares_cuda<T>(grads_, flat_, norm_result_, ctx_);
    }
    double r = 0;
    LOOM_CUDA_CHECK(
        cudaMemcpyAsync(&r, norm_result_, sizeof(double), cudaMemcpyDeviceToHost, ctx_.stream()));
    ctx_.synchronize();
    return r;
}

// Sum of squares of base[b, e) over `ranges`: one partial sum per range,
// added on the host in a fixed order (deterministic).
template <typename T>
template <typename U>
double CudaExecutor<T>::sum_squares_ranges(const U* base, const std::vector<IndexRange>& ranges) {
    if (ranges.empty()) return 0.0;
    if (norm_parts_n_ < int64_t(ranges.size())) {
        if (norm_parts_) LOOM_CUDA_CHECK(cudaFree(norm_parts_));
        norm_parts_ = nullptr;
        LOOM_CUDA_CHECK(cudaMalloc(&norm_parts_, ranges.size() * sizeof(double)));
        norm_parts_n_ = int64_t(ranges.size());
    }
    for (size_t i = 0; i < ranges.size(); ++i)
        sum_squares_cuda<U>(base + ranges[i].first, ranges[i].second - ranges[i].first,
                            norm_parts_ + i, ctx_);
    std::vector<double> parts(ranges.size());
    LOOM_CUDA_CHECK(cudaMemcpyAsync(parts.data(), norm_parts_, parts.size() * sizeof(double),
                                    cudaMemcpyDeviceToHost, ctx_.stream()));
    ctx_.synchronize();
    double sq = 0;
    for (double p : parts) sq += p;
    return sq;
}

template <typename T>
double CudaExecutor<T>::grad_norm_sq_excluding(
    const std::vector<std::pair<int64_t, int64_t>>& excluded) {
    if (excluded.empty()) return grad_norm_sq();
    check_shard_attached();
    const std::vector<IndexRange> keep = kept_ranges(flat_, excluded);
    if (!shard_) return sum_squares_ranges(grads_, keep);  // the replica's reduced gradients
    // ZeRO: this rank's shard pieces outside the excluded ranges, then the
    // partial sums over dp (every rank joins, with or without kept pieces).
    std::vector<ShardPiece> pieces;
    for (const CudaShard::Chunk& c : shard_->chunks)
        pieces.push_back({c.flat_begin, c.flat_end, c.shard_begin, c.flat_end - c.flat_begin});
    const double local = sum_squares_ranges(shard_->grads, shard_kept_ranges(pieces, keep));
    // `local` outlives the copy: the host waits for the stream below.
    LOOM_CUDA_CHECK(cudaMemcpyAsync(norm_result_, &local, sizeof(double), cudaMemcpyHostToDevice,
                                    ctx_.stream()));
    shard_->all_reduce_sum(norm_result_, 1);
    double r = 0;
    LOOM_CUDA_CHECK(
        cudaMemcpyAsync(&r, norm_result_, sizeof(double), cudaMemcpyDeviceToHost, ctx_.stream()));
    ctx_.synchronize();
    return r;
}

template <typename T>
template <typename Grad>
void CudaExecutor<T>::apply_update(const Grad* g, T* copy, double lr, float gs) {
    const AdamWParams& hp = options_.adamw;
    switch (options_.optimizer) {
        case OptimizerKind::adamw:
            for (const ShardSegment& s : segments_) {
                AdamWParams shp = hp;
                shp.lr = lr;
                if (!s.decay) shp.weight_decay = 0.0;
                if constexpr (std::is_same_v<T, float> && std::is_same_v<Grad, float>)
                    adamw_update_cuda(master_ + s.flat, g + s.shard, m_ + s.shard, v_ + s.shard,
                                      s.n, shp, step_, ctx_, gs);
                else
                    adamw_update_mixed_cuda<Grad, T>(master_ + s.flat, g + s.shard, m_ + s.shard,
                                                     v_ + s.shard, copy ? copy + s.flat : nullptr,
                                                     s.n, shp, step_, ctx_, gs);
            }
            break;
        case OptimizerKind::sgd:
            for (const ShardSegment& s : segments_)
                sgd_update_cuda<Grad, T>(master_ + s.flat, g + s.shard,
                                         copy ? copy + s.flat : nullptr, s.n, lr,
                                         s.decay ? hp.weight_decay : 0.0, ctx_, gs);
            break;
        case OptimizerKind::lamb: {
            const LambStep ls = lamb_step_constants(hp.beta1, hp.beta2, hp.eps, hp.weight_decay,
                                                    options_.lamb_bias_correction, step_);
            const int32_t rows = int32_t(table_.size());
            lamb_moments_cuda<Grad>(master_, g, m_, v_, lamb_tiles_, lamb_n_tiles_, lamb_row_begin_,
                                    rows, lamb_tile_sums_, lamb_row_sums_, ls, ctx_, gs);
            // Each rank holds some elements of a tensor: the whole tensor's
            // sums of squares are the sum of every rank's.
            if (shard_) shard_->all_reduce_sum(lamb_row_sums_, 2 * int64_t(rows));
            lamb_apply_cuda<T>(master_, copy, m_, v_, lamb_tiles_, lamb_n_tiles_, lamb_row_sums_,
                               ls, lr, ctx_);
            break;
        }
    }
}

template <typename T>
void CudaExecutor<T>::step(double lr, double grad_scale) {
    check_owner("step");
    check_shard_attached();
    ++step_;
    const float gs = float(grad_scale);
    if (shard_) {
        apply_update<float>(shard_->grads, nullptr, lr, gs);
        // Every rank's updated pieces into every rank's master weights, then
        // the compute copy from them (fp32: the master is the copy).
        shard_->gather_params(master_);
        if constexpr (!std::is_same_v<T, float>)
            convert_cuda<T, float>(params_, master_, flat_, ctx_);
    } else {
        T* copy = nullptr;
        if constexpr (!std::is_same_v<T, float>) copy = params_;
        apply_update<T>(grads_, copy, lr, gs);
    }
    zero_grad();
}

template <typename T>
std::map<std::string, Tensor> CudaExecutor<T>::optimizer_state() {
    check_owner("optimizer_state");
    check_shard_attached();
    if (!has_moments(options_.optimizer)) return {};  // SGD: the step count only
    const size_t bytes = size_t(std::max<int64_t>(flat_, 1)) * sizeof(float);
    auto m = Storage::alloc(bytes, false), v = Storage::alloc(bytes, false);
    const float* src[2] = {m_, v_};
    Storage* dst[2] = {m.get(), v.get()};
    for (int k = 0; k < 2; ++k) {
        const float* full = src[k];
        if (shard_) {
            // Collective: every rank's shard into a whole-buffer copy.
            float* f = static_cast<float*>(ctx_.scratch(bytes));
            LOOM_CUDA_CHECK(cudaMemsetAsync(f, 0, bytes, ctx_.stream()));
            shard_->gather_flat(src[k], f);
            full = f;
        }
        LOOM_CUDA_CHECK(cudaMemcpyAsync(dst[k]->data(), full, size_t(flat_) * sizeof(float),
                                        cudaMemcpyDeviceToHost, ctx_.stream()));
        ctx_.synchronize();  // the scratch region is reused by the next round
    }
    return moment_state_tensors(table_, m, v);
}

template <typename T>
void CudaExecutor<T>::load_optimizer_state(const std::map<std::string, Tensor>& state,
                                           int64_t step) {
    check_owner("load_optimizer_state");
    check_shard_attached();
    LOOM_CHECK(step >= 0, "optimizer state: negative step {}", step);
    if (!has_moments(options_.optimizer)) {
        LOOM_CHECK(state.empty(),
                   "sgd: the checkpoint holds optimizer state ({} ...): it was saved by another "
                   "optimizer (hyperparameters.optim must match the checkpoint's)",
                   state.empty() ? "" : state.begin()->first);
        step_ = step;
        return;
    }
    const size_t bytes = size_t(std::max<int64_t>(flat_, 1)) * sizeof(float);
    auto m = Storage::alloc(bytes), v = Storage::alloc(bytes);
    load_moment_state(table_, state, *m, *v, "optimizer");
    const float* hm = static_cast<const float*>(m->data());
    const float* hv = static_cast<const float*>(v->data());
    if (shard_) {
        // This rank's part only, at its shard offsets.
        LOOM_CUDA_CHECK(
            cudaMemsetAsync(m_, 0, size_t(std::max<int64_t>(state_n_, 1)) * 4, ctx_.stream()));
        LOOM_CUDA_CHECK(
            cudaMemsetAsync(v_, 0, size_t(std::max<int64_t>(state_n_, 1)) * 4, ctx_.stream()));
        for (const ShardSegment& s : segments_) {
            LOOM_CUDA_CHECK(cudaMemcpyAsync(m_ + s.shard, hm + s.flat, size_t(s.n) * sizeof(float),
                                            cudaMemcpyHostToDevice, ctx_.stream()));
            LOOM_CUDA_CHECK(cudaMemcpyAsync(v_ + s.shard, hv + s.flat, size_t(s.n) * sizeof(float),
                                            cudaMemcpyHostToDevice, ctx_.stream()));
        }
    } else {
        LOOM_CUDA_CHECK(cudaMemcpyAsync(m_, hm, size_t(flat_) * sizeof(float),
                                        cudaMemcpyHostToDevice, ctx_.stream()));
        LOOM_CUDA_CHECK(cudaMemcpyAsync(v_, hv, size_t(flat_) * sizeof(float),
                                        cudaMemcpyHostToDevice, ctx_.stream()));
    }
    ctx_.synchronize();
    step_ = step;
}

#define LOOM_INSTANTIATE(T)                                                                   \
    template void CudaExecutor<T>::optim_setup();                                             \
    template void CudaExecutor<T>::optim_release();                                           \
    template void CudaExecutor<T>::set_shard(CudaShard);                                      \
    template double CudaExecutor<T>::grad_norm_sq();                                          \
    template double CudaExecutor<T>::grad_norm_sq_excluding(                                  \
        const std::vector<std::pair<int64_t, int64_t>>&);                                     \
    template void CudaExecutor<T>::step(double, double);                                      \
    template std::map<std::string, Tensor> CudaExecutor<T>::optimizer_state();                \
    template void CudaExecutor<T>::load_optimizer_state(const std::map<std::string, Tensor>&, \
                                                        int64_t);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

}  // namespace loom
