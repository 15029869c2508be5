// CudaExecutor: tensor parallelism, the device side of what nn/linear.h,
// nn/embedding.h and comm/tp_vocab.h do on the CPU. The executor knows no
// layout: a module that declares a tp group (Linear::tp with its TpRole, a
// vocab-parallel Embedding or decoder) gets the same Megatron collectives,
// posted on the device twin of that group (CudaModelOptions::tp, a CommNccl):
//   column linear   "f" bwd: all_reduce(sum, tp) of dx
//   row linear      "g" fwd: all_reduce(sum, tp) of the partial products,
//                   then the replicated bias
//   word table      "g" fwd: all_reduce(sum, tp) of the owned rows' lookups
//   vocab xent      all_reduce(max, tp) of row maxima, all_reduce(sum, tp) of
//                   [exp sums | target logits]; backward reuses both
// Each collective is ordered after the kernels before it on the compute stream
// and the compute stream waits for it on the device (CommNccl's events): the
// host never blocks to post. It waits for them (bounded by the group's
// timeout, so a dead peer is reported rather than hung on) before it next
// blocks on the stream itself: the loss copy and the end of backward.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "comm/tp_vocab.h"
#include "core/check.h"
#include "models/cuda/cuda_executor.h"
#include "ops/cuda/elementwise_cuda.h"
#include "ops/cuda/embedding_cuda.h"
#include "ops/cuda/softmax_xent_cuda.h"
#include "ops/cuda/tp_vocab_cuda.h"

#if defined(LOOM_HAVE_NCCL)
#include "comm/cuda/comm_nccl.h"
#endif

namespace loom {

template <typename T>
void CudaExecutor<T>::tp_setup() {
    const ModelTp& mt = cpu_.placement().tp;
    if (!mt.active()) {
        LOOM_CHECK(options_.tp == nullptr || options_.tp->size() == 1,
                   "CUDA executor: a tp group of {} ranks for a model that is not sharded",
                   options_.tp ? options_.tp->size() : 0);
        return;
    }
    LOOM_CHECK(options_.tp != nullptr,
               "CUDA executor: the model is sharded over {} tensor-parallel ranks; it needs the "
               "device twin of that tp group (CudaModelOptions::tp)",
               mt.size);
    LOOM_CHECK(options_.tp->size() == mt.size && options_.tp->rank() == mt.rank,
               "CUDA executor: the device tp group is rank {} of {}, the model was sharded as "
               "rank {} of {}",
               options_.tp->rank(), options_.tp->size(), mt.rank, mt.size);
#if defined(LOOM_HAVE_NCCL)
    auto* nccl = dynamic_cast<CommNccl*>(options_.tp);
    LOOM_CHECK(nccl != nullptr && nccl->device() == options_.device,
               "CUDA executor: the tp group must be an NCCL communicator on device {}",
               options_.device);
    // Collectives then wait for the kernels this executor queued before them.
    nccl->set_compute_stream(ctx_.stream());
    tp_ = options_.tp;
#else
    LOOM_FAIL("CUDA executor: tensor parallelism on GPUs needs a build with NCCL");
#endif
}

template <typename T>
void CudaExecutor<T>::tp_all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) {
    LOOM_ASSERT(tp_ != nullptr, "tp_all_reduce without a tp group");
    WorkPtr w = tp_->all_reduce(buf, count, dtype, op);
#if defined(LOOM_HAVE_NCCL)
    static_cast<CommNccl*>(tp_)->make_stream_wait(*w, ctx_.stream());
#else
    w->wait();
#endif
    tp_pending_.push_back(std::move(w));
}

template <typename T>
void CudaExecutor<T>::tp_drain() {
    for (WorkPtr& w : tp_pending_) w->wait();
    tp_pending_.clear();
}

template <typename T>
void CudaExecutor<T>::vocab_embed_forward(const Embedding& m, T* out, const int64_t* ids) {
    const TpVocabRange r = tp_vocab_range(m.V, tp_->size(), tp_->rank());
    vocab_parallel_lookup_cuda<T>(out, ids, P(m.table), N_, m.V, m.C, r.first, r.count, ctx_);
    // Megatron "g": exactly one rank contributes each row.
    tp_all_reduce(out, N_ * m.C, grad_dtype(), ReduceOp::sum);
}

template <typename T>
void CudaExecutor<T>::vocab_embed_backward(const Embedding& m, const int64_t* ids, const T* dout) {
    T* g = G(m.table);
    if (!g) return;
    // "g" bwd is the identity (dout is replicated): each rank adds into its
    // own rows; ids it does not own (and padding_idx) map to an extra row
    // index that the deterministic backward skips as padding.
    const TpVocabRange r = tp_vocab_range(m.V, tp_->size(), tp_->rank());
    vocab_parallel_backward_ids_cuda(tp_ids_, ids, N_, r.first, r.count, m.padding_idx, ctx_);
    embedding_backward_cuda<T>(g, tp_ids_, dout, N_, r.count + 1, m.C, r.count, ctx_);
}

template <typename T>
XentSum CudaExecutor<T>::head_xent_forward(const Linear& decoder, const T* logits,
                                           const int64_t* targets, int64_t N, int64_t V) {
    if (decoder.tp == nullptr)
        return softmax_xent_forward_cuda<T>(nullptr, logits, targets, N, V, ctx_);
    const TpVocabRange r = tp_vocab_range(V, tp_->size(), tp_->rank());
    LOOM_ASSERT(r.count == decoder.out, "vocab-parallel decoder of {} rows, slice of {}",
                decoder.out, r.count);
    const int64_t valid = std::clamp<int64_t>(V - r.first, 0, r.count);
    vocab_xent_local_max_cuda<T>(xent_max_, logits, N, r.count, valid, ctx_);
    tp_all_reduce(xent_max_, N, DType::f32, ReduceOp::max);
    vocab_xent_local_stats_cuda<T>(xent_stats_, logits, targets, xent_max_, N, r.count, valid,
                                   r.first, V, ctx_);
    tp_all_reduce(xent_stats_, 2 * N, DType::f32, ReduceOp::sum);
    vocab_xent_loss_sum_cuda(xent_result_, xent_max_, xent_stats_, targets, N, V, ctx_);
    XentSum out{};
    LOOM_CUDA_CHECK(
        cudaMemcpyAsync(&out, xent_result_, sizeof out, cudaMemcpyDeviceToHost, ctx_.stream()));
    tp_drain();                  // a failed collective reports here, not as a hang below
    ctx_.check_device_errors();  // synchronises
    return out;
}

template <typename T>
void CudaExecutor<T>::head_xent_backward(const Linear& decoder, T* logits, const int64_t* targets,
                                         int64_t N, int64_t V, double scale) {
    if (decoder.tp == nullptr) {
        softmax_xent_backward_cuda<T>(logits, logits, targets, N, V, scale, ctx_);
        return;
    }
    // The forward's reduced maxima and sums: the logits have not changed.
    const TpVocabRange r = tp_vocab_range(V, tp_->size(), tp_->rank());
    const int64_t valid = std::clamp<int64_t>(V - r.first, 0, r.count);
    vocab_xent_backward_cuda<T>(logits, logits, targets, xent_max_, xent_stats_, N, r.count, valid,
                                r.first, V, scale, ctx_);
}

#define LOOM_INSTANTIATE(T)                                                                       \
    template void CudaExecutor<T>::tp_setup();                                                    \
    template void CudaExecutor<T>::tp_all_reduce(void*, int64_t, DType, ReduceOp);                \
    template void CudaExecutor<T>::tp_drain();                                                    \
    template void CudaExecutor<T>::vocab_embed_forward(const Embedding&, T*, const int64_t*);     \
    template void CudaExecutor<T>::vocab_embed_backward(const Embedding&, const int64_t*,         \
                                                        const T*);                                \
    template XentSum CudaExecutor<T>::head_xent_forward(const Linear&, const T*, const int64_t*,  \
                                                        int64_t, int64_t);                        \
    template void CudaExecutor<T>::head_xent_backward(const Linear&, T*, const int64_t*, int64_t, \
                                                      int64_t, double);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

}  // namespace loom
