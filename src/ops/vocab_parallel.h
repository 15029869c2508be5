// The local halves of the vocab-parallel embedding and cross-entropy
// (semantics of comm/tp_vocab.h): what one tensor-parallel rank computes on
// its vocabulary slice between the collectives, which the caller posts. The
// CPU's kernels, reached through comm/tp_vocab.cpp and the CPU NnOps table;
// ops/cuda/embedding_cuda.cu and softmax_xent_cuda.cu hold the same steps on CUDA.
//
// A rank's slice is ids [first, first + count) of the vocabulary padded to a
// multiple of the tp size; ids >= V are padding (rows of zeros, never looked
// up, excluded from the softmax): `valid` = the slice's real columns.
//
// Cross-entropy, one function per step:
//   local_max   row maxima over the valid columns          -> all_reduce(max)
//   local_stats [sum of exp(x - max) (N) | the target's logit where this rank
//               owns it, else 0 (N)]                       -> all_reduce(sum)
//   loss_sum    over labelled rows of (max + log(sum)) - target logit, each
//               row in T and summed in double in row order (the same XentSum
//               on every rank)
//   backward    dlogits = scale * (exp(x - max) / sum - onehot), 0 on padding
//               columns and ignored rows, from the reduced max and sums.
// Ids outside [0, V) and targets outside [0, V) other than -100 are errors.
// Nothing here communicates.
#pragma once

#include <cstdint>

#include "ops/softmax_xent.h"

namespace loom {

// Columns of a slice that are real vocabulary.
int64_t vocab_slice_valid(int64_t V, int64_t first, int64_t count);

// out (N, C) = table_local[id - first] where this rank owns the id, 0
// elsewhere (overwrites).
template <typename T>
void vocab_lookup_local(T* out, const int64_t* ids, const T* table_local, int64_t N, int64_t V,
                        int64_t C, int64_t first, int64_t count);

// dtable_local (count, C) += dout's rows of the ids this rank owns, other
// than padding_idx (< 0: none), in row order.
template <typename T>
void vocab_embedding_backward_local(T* dtable_local, const int64_t* ids, const T* dout, int64_t N,
                                    int64_t V, int64_t C, int64_t first, int64_t count,
                                    int64_t padding_idx);

// row_max (N) over the first `valid` of each row's Vl columns (-inf if none).
template <typename T>
void vocab_xent_local_max(T* row_max, const T* logits_local, int64_t N, int64_t Vl, int64_t valid);

// sums (N) of exp(x - row_max) over the valid columns.
template <typename T>
void vocab_xent_local_sums(T* sums, const T* logits_local, const T* row_max, int64_t N, int64_t Vl,
                           int64_t valid);

// stats (2N) = [sums (N) | target logits (N)] (see above).
template <typename T>
void vocab_xent_local_stats(T* stats, const T* logits_local, const int64_t* targets,
                            const T* row_max, int64_t N, int64_t Vl, int64_t valid, int64_t first,
                            int64_t V);

// From the reduced row_max (N) and stats (2N); losses (N) may be null.
template <typename T>
XentSum vocab_xent_loss_sum(T* losses, const T* row_max, const T* stats, const int64_t* targets,
                            int64_t N);

// dlogits_local (N, Vl), overwritten, from the reduced row_max (N) and sums
// (N, the first half of stats).
template <typename T>
void vocab_xent_backward_local(T* dlogits_local, const T* logits_local, const int64_t* targets,
                               const T* row_max, const T* sums, int64_t N, int64_t Vl,
                               int64_t valid, int64_t first, int64_t V, double scale);

}  // namespace loom
