// Vocab-parallel embedding and softmax cross-entropy (Megatron
// VocabParallelEmbedding and tensor_parallel/cross_entropy.py): the vocabulary
// dim of the word table and of the logits is split over the tp group, and the
// full (N, V) logits are never gathered.
//
// Vocabulary padding: rank r holds ids [r*Vl, (r+1)*Vl) with
// Vl = tp_vocab_padded(V, tp) / tp, i.e. V rounded up to a multiple of the tp
// size. The rows (logit columns) at ids >= V exist only on the last ranks, hold
// zeros and are never looked up; the cross-entropy excludes those columns (as
// if their logits were -inf), so the loss is the unpadded model's, not
// Megatron's padded-vocab loss. With tp = 1 and V already a multiple, nothing
// is padded.
//
//   embedding fwd  each rank looks up the ids it owns, zeros elsewhere, then
//                  Megatron "g": all_reduce(sum) on tp -> out (N, C) replicated
//   embedding bwd  Megatron "g" bwd is the identity: dout is replicated, each
//                  rank accumulates (+=) into its own rows only
//   xent fwd       max over the vocab: all_reduce(max) on tp; sum of
//                  exp(x - max) and the target's logit (only its owner adds
//                  it): one all_reduce(sum) on tp of both
//   xent bwd       dlogits_local = scale * (softmax - onehot) on the rank's
//                  columns; recomputes max and sum-exp (two all_reduces on tp
//                  of N values each) rather than keeping (N, V/tp) softmax
//
// Same semantics as ops/embedding.h and ops/softmax_xent.h: ids outside [0, V)
// and targets outside [0, V) other than -100 are errors; the xent forward
// returns the loss sum and label count (the caller normalises), its backward
// overwrites dlogits and leaves 0 on ignored rows.
//
// The local steps between the collectives are ops/vocab_parallel.h's; the one
// model stack posts the same collectives around its device table's steps
// (nn/embedding.h, nn/vocab_xent.h, whose backward reuses the forward's
// reduced maxima and sums instead of recomputing them).
//
// Not here: the tied LM head GEMM (a column-parallel linear over the local
// table rows, tp_layers.h) and label smoothing.
#pragma once

#include <cstdint>

#include "comm/comm.h"
#include "ops/softmax_xent.h"

namespace loom {

// V rounded up to a multiple of tp_size.
int64_t tp_vocab_padded(int64_t V, int tp_size);
// Ids [first, first + count) of this rank's vocab slice; count = Vp / tp_size.
struct TpVocabRange {
    int64_t first = 0, count = 0;
};
TpVocabRange tp_vocab_range(int64_t V, int tp_size, int tp_rank);

// table_local (Vl, C) <- rows [first, first + Vl) of table (V, C), zeros past V.
template <typename T>
void tp_vocab_shard_for_rank(T* table_local, const T* table, int64_t V, int64_t C, int tp_size,
                             int tp_rank);
// table (V, C) on every rank <- every rank's table_local (all_gather on tp),
// the padding rows dropped. Checkpoint saving.
template <typename T>
void tp_vocab_assemble(T* table, const T* table_local, int64_t V, int64_t C, Communicator& tp);

template <typename T>
void vocab_parallel_embedding_forward(T* out,                // (N, C), replicated on tp
                                      const int64_t* ids,    // (N), replicated on tp
                                      const T* table_local,  // (Vl, C)
                                      int64_t N, int64_t V, int64_t C, Communicator& tp);

// dtable_local (Vl, C) +=; ids equal to padding_idx get no gradient (< 0: none).
template <typename T>
void vocab_parallel_embedding_backward(T* dtable_local, const int64_t* ids,
                                       const T* dout,  // (N, C), replicated on tp
                                       int64_t N, int64_t V, int64_t C, Communicator& tp,
                                       int64_t padding_idx = -1);

// Loss sum and count over all N rows (identical on every rank of tp).
template <typename T>
XentSum vocab_parallel_xent_forward(T* losses,               // (N) or null, replicated
                                    const T* logits_local,   // (N, Vl)
                                    const int64_t* targets,  // (N), global ids, replicated
                                    int64_t N, int64_t V, Communicator& tp);

// dlogits_local (N, Vl) = scale * (softmax - onehot(target)) on this rank's
// columns; 0 on ignored rows and padding columns. Overwrites.
template <typename T>
void vocab_parallel_xent_backward(T* dlogits_local, const T* logits_local, const int64_t* targets,
                                  int64_t N, int64_t V, double scale, Communicator& tp);

}  // namespace loom
