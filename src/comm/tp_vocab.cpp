// Vocab-parallel embedding and cross-entropy over a tp Communicator.
//
// Per row of the cross-entropy: m = all_reduce(max) of the local maxima,
// s = all_reduce(sum) of the local sums of exp(x - m), loss = m + log(s) - x_t,
// where x_t comes from the rank owning the target (the others add 0, so the
// sum is exact). The local steps are ops/vocab_parallel.h's (the CPU's
// kernels, which the one model stack reaches through its NnOps table with the
// collectives posted by nn/vocab_xent.h); the per-row losses are summed in
// double in row order, so every rank returns the same XentSum.
#include "comm/tp_vocab.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "ops/vocab_parallel.h"

namespace loom {
namespace {

// Global row maxima over the valid columns: all_reduce(max) on tp.
template <typename T>
std::vector<T> global_row_max(const T* logits_local, int64_t N, const TpVocabRange& r,
                              int64_t valid, Communicator& tp) {
    std::vector<T> m(static_cast<size_t>(N));
    vocab_xent_local_max(m.data(), logits_local, N, r.count, valid);
    if (tp.size() > 1) tp.all_reduce(m.data(), N, dtype_of<T>(), ReduceOp::max)->wait();
    return m;
}

}  // namespace

int64_t tp_vocab_padded(int64_t V, int tp_size) {
    LOOM_CHECK(tp_size >= 1 && V >= 0, "tp_vocab_padded: V {} tp size {}", V, tp_size);
    return (V + tp_size - 1) / tp_size * tp_size;
}

TpVocabRange tp_vocab_range(int64_t V, int tp_size, int tp_rank) {
    LOOM_CHECK(tp_rank >= 0 && tp_rank < tp_size, "tp_vocab_range: rank {} of {}", tp_rank,
               tp_size);
    const int64_t count = tp_vocab_padded(V, tp_size) / tp_size;
    return {int64_t(tp_rank) * count, count};
}

template <typename T>
void tp_vocab_shard_for_rank(T* table_local, const T* table, int64_t V, int64_t C, int tp_size,
                             int tp_rank) {
    const TpVocabRange r = tp_vocab_range(V, tp_size, tp_rank);
    const int64_t valid = vocab_slice_valid(V, r.first, r.count);
    std::copy(table + r.first * C, table + (r.first + valid) * C, table_local);
    std::fill(table_local + valid * C, table_local + r.count * C, T(0));
}

template <typename T>
void tp_vocab_assemble(T* table, const T* table_local, int64_t V, int64_t C, Communicator& tp) {
    const int64_t Vp = tp_vocab_padded(V, tp.size());
    const int64_t n = Vp / tp.size() * C;
    std::vector<T> staged(size_t(Vp * C));  // (Vp, C): rank slices are consecutive rows
    if (tp.size() == 1)
        std::copy(table_local, table_local + n, staged.data());
    else
        tp.all_gather(table_local, staged.data(), n, dtype_of<T>())->wait();
    std::copy(staged.data(), staged.data() + V * C, table);
}

template <typename T>
void vocab_parallel_embedding_forward(T* out, const int64_t* ids, const T* table_local, int64_t N,
                                      int64_t V, int64_t C, Communicator& tp) {
    const TpVocabRange r = tp_vocab_range(V, tp.size(), tp.rank());
    vocab_lookup_local(out, ids, table_local, N, V, C, r.first, r.count);
    // Megatron "g" forward: exactly one rank contributes each row (all_reduce sum on tp).
    if (tp.size() > 1) tp.all_reduce(out, N * C, dtype_of<T>(), ReduceOp::sum)->wait();
}

template <typename T>
void vocab_parallel_embedding_backward(T* dtable_local, const int64_t* ids, const T* dout,
                                       int64_t N, int64_t V, int64_t C, Communicator& tp,
                                       int64_t padding_idx) {
    // Megatron "g" backward is the identity: no collective.
    const TpVocabRange r = tp_vocab_range(V, tp.size(), tp.rank());
    vocab_embedding_backward_local(dtable_local, ids, dout, N, V, C, r.first, r.count, padding_idx);
}

template <typename T>
XentSum vocab_parallel_xent_forward(T* losses, const T* logits_local, const int64_t* targets,
                                    int64_t N, int64_t V, Communicator& tp) {
    const TpVocabRange r = tp_vocab_range(V, tp.size(), tp.rank());
    const int64_t valid = vocab_slice_valid(V, r.first, r.count);
    const std::vector<T> m = global_row_max(logits_local, N, r, valid, tp);
    std::vector<T> stats(size_t(2 * N));  // [sum exp(x - m) (N) | target logit (N)]
    vocab_xent_local_stats(stats.data(), logits_local, targets, m.data(), N, r.count, valid,
                           r.first, V);
    if (tp.size() > 1) tp.all_reduce(stats.data(), 2 * N, dtype_of<T>(), ReduceOp::sum)->wait();
    return vocab_xent_loss_sum(losses, m.data(), stats.data(), targets, N);
}

template <typename T>
void vocab_parallel_xent_backward(T* dlogits_local, const T* logits_local, const int64_t* targets,
                                  int64_t N, int64_t V, double scale, Communicator& tp) {
    const TpVocabRange r = tp_vocab_range(V, tp.size(), tp.rank());
    const int64_t valid = vocab_slice_valid(V, r.first, r.count);
    const std::vector<T> m = global_row_max(logits_local, N, r, valid, tp);
    std::vector<T> s(static_cast<size_t>(N));
    vocab_xent_local_sums(s.data(), logits_local, m.data(), N, r.count, valid);
    if (tp.size() > 1) tp.all_reduce(s.data(), N, dtype_of<T>(), ReduceOp::sum)->wait();
    vocab_xent_backward_local(dlogits_local, logits_local, targets, m.data(), s.data(), N, r.count,
                              valid, r.first, V, scale);
}

#define LOOM_TP_VOCAB_INSTANTIATE(T)                                                              \
    template void tp_vocab_shard_for_rank<T>(T*, const T*, int64_t, int64_t, int, int);           \
    template void tp_vocab_assemble<T>(T*, const T*, int64_t, int64_t, Communicator&);            \
    template void vocab_parallel_embedding_forward<T>(T*, const int64_t*, const T*, int64_t,      \
                                                      int64_t, int64_t, Communicator&);           \
    template void vocab_parallel_embedding_backward<T>(T*, const int64_t*, const T*, int64_t,     \
                                                       int64_t, int64_t, Communicator&, int64_t); \
    template XentSum vocab_parallel_xent_forward<T>(T*, const T*, const int64_t*, int64_t,        \
                                                    int64_t, Communicator&);                      \
    template void vocab_parallel_xent_backward<T>(T*, const T*, const int64_t*, int64_t, int64_t, \
                                                  double, Communicator&)

LOOM_TP_VOCAB_INSTANTIATE(float);
LOOM_TP_VOCAB_INSTANTIATE(double);

#undef LOOM_TP_VOCAB_INSTANTIATE

}  // namespace loom
