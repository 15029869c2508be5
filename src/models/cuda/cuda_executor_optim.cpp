// CudaExecutor: the optimizer step and the gradient norm. The optimizer is
// FlatOptimizer (optim/flat_optimizer.h: AdamW, LAMB or SGD, whole or as
// this rank's ZeRO shard) on the CUDA backend over the executor's device
// buffers; what stays here is the executor's side of it: the fp32 master,
// the compute-type gradients and copy, the all-gather after a sharded step,
// and the norms over the flat buffer or the shard.
#include <cuda_runtime.h>

#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "core/check.h"
#include "models/cuda/cuda_executor.h"
#include "ops/cuda/device_ops_cuda.h"
#include "ops/cuda/elementwise_cuda.h"
#include "parallel/norm_ranges.h"

namespace loom {

template <typename T>
void CudaExecutor<T>::optim_setup() {
    backend_ = make_cuda_backend(ctx_);
    OptimizerConfig c;
    c.kind = options_.optimizer;
    c.hp = options_.adamw;
    c.lamb_bias_correction = options_.lamb_bias_correction;
    c.decay = options_.decay_all ? DecayPolicy::all : DecayPolicy::table;
    UpdateBuffers target;
    target.master = master_;
    target.grad = grads_;
    target.grad_dtype = grad_dtype();
    if constexpr (!std::is_same_v<T, float>) {
        target.copy = params_;
        target.copy_dtype = grad_dtype();  // the compute type
    }
    optim_ = std::make_unique<FlatOptimizer>(*backend_, table_, c, target);
}

template <typename T>
void CudaExecutor<T>::optim_release() {
    optim_.reset();
    backend_.reset();
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
    std::vector<ShardPiece> pieces;
    for (const CudaShard::Chunk& c : shard.chunks) {
        LOOM_CHECK(c.flat_begin >= 0 && c.flat_end >= c.flat_begin && c.flat_end <= flat_ &&
                       c.shard_begin >= 0 &&
                       c.shard_begin + (c.flat_end - c.flat_begin) <= shard.numel,
                   "set_shard: chunk [{}, {}) at shard offset {} outside the buffers", c.flat_begin,
                   c.flat_end, c.shard_begin);
        pieces.push_back({c.flat_begin, c.flat_end, c.shard_begin, c.flat_end - c.flat_begin});
    }
    OptimizerShard os;
    for (const ShardSegment& s :
         shard_segments(table_, pieces, options_.decay_all ? DecayPolicy::all : DecayPolicy::table))
        if (table_.row(s.row).local) os.segments.push_back(s);
    os.numel = shard.numel;
    os.grads = shard.grads;
    os.all_reduce_sum = shard.all_reduce_sum;
    os.gather_flat = shard.gather_flat;
    optim_->set_shard(std::move(os));
    shard_ = std::move(shard);
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
void CudaExecutor<T>::step(double lr, double grad_scale) {
    check_owner("step");
    check_shard_attached();
    optim_->step(lr, float(grad_scale));
    if (shard_) {
        // Every rank's updated pieces into every rank's master weights, then
        // the compute copy from them (fp32: the master is the copy).
        shard_->gather_params(master_);
        if constexpr (!std::is_same_v<T, float>)
            convert_cuda<T, float>(params_, master_, flat_, ctx_);
    }
    zero_grad();
}

template <typename T>
int64_t CudaExecutor<T>::step_count() const {
    return owner_ ? owner_->step_count() : optim_->step_count();
}

template <typename T>
std::map<std::string, Tensor> CudaExecutor<T>::optimizer_state() {
    check_owner("optimizer_state");
    check_shard_attached();
    return optim_->state_tensors();
}

template <typename T>
void CudaExecutor<T>::load_optimizer_state(const std::map<std::string, Tensor>& state,
                                           int64_t step) {
    check_owner("load_optimizer_state");
    check_shard_attached();
    optim_->load_state(state, step);
}

#define LOOM_INSTANTIATE(T)                                                                   \
    template void CudaExecutor<T>::optim_setup();                                             \
    template void CudaExecutor<T>::optim_release();                                           \
    template void CudaExecutor<T>::set_shard(CudaShard);                                      \
    template double CudaExecutor<T>::grad_norm_sq();                                          \
    template double CudaExecutor<T>::grad_norm_sq_excluding(                                  \
        const std::vector<std::pair<int64_t, int64_t>>&);                                     \
    template void CudaExecutor<T>::step(double, double);                                      \
    template int64_t CudaExecutor<T>::step_count() const;                                     \
    template std::map<std::string, Tensor> CudaExecutor<T>::optimizer_state();                \
    template void CudaExecutor<T>::load_optimizer_state(const std::map<std::string, Tensor>&, \
                                                        int64_t);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

}  // namespace loom
