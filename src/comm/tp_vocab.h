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
// Here: that layout (the padded size, each rank's range, a slice of a whole
// table and the whole table from the slices, for loading and checkpoints).
// The vocab-parallel embedding and cross-entropy themselves are
// nn/embedding.h and nn/vocab_xent.h: their local steps go through the device
// table (ops/vocab_parallel.h on the CPU), with Megatron's collectives posted
// around them:
//   embedding fwd  each rank looks up the ids it owns, zeros elsewhere, then
//                  Megatron "g": all_reduce(sum) on tp -> out (N, C) replicated
//   embedding bwd  Megatron "g" bwd is the identity: dout is replicated, each
//                  rank accumulates (+=) into its own rows only
//   xent fwd       max over the vocab: all_reduce(max) on tp; sum of
//                  exp(x - max) and the target's logit (only its owner adds
//                  it): one all_reduce(sum) on tp of both
//   xent bwd       dlogits_local = scale * (softmax - onehot) on the rank's
//                  columns, from the forward's reduced maxima and sums
//
// Not here: the tied LM head GEMM (a column-parallel linear over the local
// table rows, tp_layers.h) and label smoothing.
#pragma once

#include <cstdint>

#include "comm/comm.h"

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

}  // namespace loom
