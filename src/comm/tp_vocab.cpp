// Vocab-parallel embedding and cross-entropy over a tp Communicator.
//
// Per row of the cross-entropy: m = all_reduce(max) of the local maxima,
// s = all_reduce(sum) of the local sums of exp(x - m), loss = m + log(s) - x_t,
// where x_t comes from the rank owning the target (the others add 0, so the
// sum is exact). The local exp sums accumulate in T as ops/softmax_xent.cpp
// does; the per-row losses are summed in double in row order, so every rank
// returns the same XentSum.
#include "comm/tp_vocab.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "ops/vec_math.h"

namespace loom {
namespace {

void check_ids(const int64_t* ids, int64_t N, int64_t V, const char* op) {
    for (int64_t n = 0; n < N; ++n)
        LOOM_CHECK(ids[n] >= 0 && ids[n] < V, "{}: id {} at row {} is outside the table's [0, {})",
                   op, ids[n], n, V);
}

void check_targets(const int64_t* targets, int64_t N, int64_t V, const char* op) {
    for (int64_t n = 0; n < N; ++n) {
        const int64_t t = targets[n];
        LOOM_CHECK(t == k_ignore_index || (t >= 0 && t < V),
                   "{}: target {} at row {} is outside [0, {}) and is not the ignore index {}", op,
                   t, n, V, k_ignore_index);
    }
}

// Columns of the local slice that are real vocabulary (the rest is padding).
int64_t valid_count(const TpVocabRange& r, int64_t V) {
    return std::clamp(V - r.first, int64_t(0), r.count);
}

// Global row maxima over the valid columns: all_reduce(max) on tp.
template <typename T>
std::vector<T> global_row_max(const T* logits_local, int64_t N, const TpVocabRange& r,
                              int64_t valid, Communicator& tp) {
    std::vector<T> m(size_t(N), -std::numeric_limits<T>::infinity());
    for (int64_t n = 0; n < N; ++n) {
        const T* x = logits_local + n * r.count;
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t i = 0; i < valid; ++i) mx = x[i] > mx ? x[i] : mx;
        m[size_t(n)] = mx;
    }
    if (tp.size() > 1) tp.all_reduce(m.data(), N, dtype_of<T>(), ReduceOp::max)->wait();
    return m;
}

template <typename T>
T local_exp_sum(const T* x, int64_t valid, T m) {
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < valid; ++i) s += vmath::exp(x[i] - m);
    return s;
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
    const int64_t valid = valid_count(r, V);
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
    check_ids(ids, N, V, "vocab_parallel_embedding_forward");
    const TpVocabRange r = tp_vocab_range(V, tp.size(), tp.rank());
    for (int64_t n = 0; n < N; ++n) {
        const int64_t local = ids[n] - r.first;
        T* dst = out + n * C;
        if (local >= 0 && local < r.count)
            std::copy(table_local + local * C, table_local + (local + 1) * C, dst);
        else
            std::fill(dst, dst + C, T(0));
    }
    // Megatron "g" forward: exactly one rank contributes each row (all_reduce sum on tp).
    if (tp.size() > 1) tp.all_reduce(out, N * C, dtype_of<T>(), ReduceOp::sum)->wait();
}

template <typename T>
void vocab_parallel_embedding_backward(T* dtable_local, const int64_t* ids, const T* dout,
                                       int64_t N, int64_t V, int64_t C, Communicator& tp,
                                       int64_t padding_idx) {
    check_ids(ids, N, V, "vocab_parallel_embedding_backward");
    // Megatron "g" backward is the identity: no collective.
    const TpVocabRange r = tp_vocab_range(V, tp.size(), tp.rank());
    // Rows in order, as ops/embedding.cpp sums them: the same result bit for bit.
    for (int64_t n = 0; n < N; ++n) {
        const int64_t local = ids[n] - r.first;
        if (ids[n] == padding_idx || local < 0 || local >= r.count) continue;
        T* dst = dtable_local + local * C;
        const T* src = dout + n * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
    }
}

template <typename T>
XentSum vocab_parallel_xent_forward(T* losses, const T* logits_local, const int64_t* targets,
                                    int64_t N, int64_t V, Communicator& tp) {
    check_targets(targets, N, V, "vocab_parallel_xent_forward");
    const TpVocabRange r = tp_vocab_range(V, tp.size(), tp.rank());
    const int64_t valid = valid_count(r, V);
    const std::vector<T> m = global_row_max(logits_local, N, r, valid, tp);

    std::vector<T> stats(size_t(2 * N), T(0));  // [sum exp(x - m) (N) | target logit (N)]
    for (int64_t n = 0; n < N; ++n) {
        const T* x = logits_local + n * r.count;
        stats[size_t(n)] = local_exp_sum(x, valid, m[size_t(n)]);
        const int64_t t = targets[n] - r.first;
        if (targets[n] != k_ignore_index && t >= 0 && t < valid) stats[size_t(N + n)] = x[t];
    }
    if (tp.size() > 1) tp.all_reduce(stats.data(), 2 * N, dtype_of<T>(), ReduceOp::sum)->wait();

    XentSum out;
    for (int64_t n = 0; n < N; ++n) {
        T loss = 0;
        if (targets[n] != k_ignore_index) {
            loss = (m[size_t(n)] + std::log(stats[size_t(n)])) - stats[size_t(N + n)];
            out.loss_sum += double(loss);
            out.count += 1;
        }
        if (losses != nullptr) losses[n] = loss;
    }
    return out;
}

template <typename T>
void vocab_parallel_xent_backward(T* dlogits_local, const T* logits_local, const int64_t* targets,
                                  int64_t N, int64_t V, double scale, Communicator& tp) {
    check_targets(targets, N, V, "vocab_parallel_xent_backward");
    const TpVocabRange r = tp_vocab_range(V, tp.size(), tp.rank());
    const int64_t valid = valid_count(r, V);
    const std::vector<T> m = global_row_max(logits_local, N, r, valid, tp);

    // Unnormalised softmax in place, then the global sums (all_reduce sum on tp).
    std::vector<T> s(size_t(N), T(0));
    for (int64_t n = 0; n < N; ++n) {
        const T* x = logits_local + n * r.count;
        T* d = dlogits_local + n * r.count;
        const T mx = m[size_t(n)];
        T acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t i = 0; i < valid; ++i) {
            d[i] = vmath::exp(x[i] - mx);
            acc += d[i];
        }
        std::fill(d + valid, d + r.count, T(0));
        s[size_t(n)] = acc;
    }
    if (tp.size() > 1) tp.all_reduce(s.data(), N, dtype_of<T>(), ReduceOp::sum)->wait();

    for (int64_t n = 0; n < N; ++n) {
        T* d = dlogits_local + n * r.count;
        if (targets[n] == k_ignore_index) {
            std::fill(d, d + r.count, T(0));
            continue;
        }
        const T f = T(scale) / s[size_t(n)];
#pragma omp simd
        for (int64_t i = 0; i < valid; ++i) d[i] *= f;
        const int64_t t = targets[n] - r.first;
        if (t >= 0 && t < valid) d[t] -= T(scale);
    }
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
