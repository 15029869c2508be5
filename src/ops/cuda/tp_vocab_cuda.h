// CUDA pieces of the tensor-parallel layers (semantics of comm/tp_vocab.h
// and nn/linear.h's row-parallel bias): the kernels a rank runs between the
// collectives, which the caller posts on its tp group. Nothing here
// communicates, so every piece is tested against the CPU on one GPU by
// reducing the ranks' partial results on the host.
//
// Vocabulary slices as tp_vocab.h: rank r owns ids [first, first + count),
// count = Vp / tp; columns (rows of the table) at ids >= V are padding, never
// looked up and excluded from the softmax.
//
// Vocab-parallel cross-entropy, one step per kernel:
//   local_max    row maxima over this rank's valid columns   -> all_reduce(max)
//   local_stats  sum of exp(x - max), the target's logit (its owner only; 0
//                elsewhere), [sums (N) | target logits (N)]   -> all_reduce(sum)
//   loss_sum     sum of max + log(sum) - target logit over labelled rows (fp64,
//                fixed order: every rank gets the same XentSum)
//   backward     dlogits = scale * (exp(x - max) / sum - onehot), 0 on padding
//                columns and ignored rows; from the forward's reduced maxima
//                and sums (the logits are unchanged in between), so backward
//                posts no collective, unlike the CPU which recomputes them.
// Targets outside [0, V) other than -100 are reported through the context's
// error record (checked where the caller synchronises) and count as ignored.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "ops/softmax_xent.h"

namespace loom {

// out (N, C) = table_local[id - first] where this rank owns the id, 0
// elsewhere (overwrites): the summand of Megatron "g" (all_reduce sum on tp).
template <typename T>
void vocab_parallel_lookup_cuda(T* out, const int64_t* ids, const T* table_local, int64_t N,
                                int64_t V, int64_t C, int64_t first, int64_t count,
                                CudaContext& ctx);

// local (N): ids for embedding_backward_cuda over this rank's Vl = count rows
// with V = count + 1 and padding_idx = count: an owned id other than
// padding_idx maps to id - first, every other one to count (skipped).
void vocab_parallel_backward_ids_cuda(int64_t* local, const int64_t* ids, int64_t N, int64_t first,
                                      int64_t count, int64_t padding_idx, CudaContext& ctx);

// y (N, OC) += bias (OC): a row-parallel linear's replicated bias, added once
// after the all-reduce of the partial products.
template <typename T>
void add_bias_cuda(T* y, const T* bias, int64_t N, int64_t OC, CudaContext& ctx);

// row_max (N) = max over the first `valid` of each row's Vl columns (-inf if none).
template <typename T>
void vocab_xent_local_max_cuda(float* row_max, const T* logits_local, int64_t N, int64_t Vl,
                               int64_t valid, CudaContext& ctx);

// stats (2N): [sum over valid columns of exp(x - row_max) | x[target - first]
// where this rank owns the target, else 0].
template <typename T>
void vocab_xent_local_stats_cuda(float* stats, const T* logits_local, const int64_t* targets,
                                 const float* row_max, int64_t N, int64_t Vl, int64_t valid,
                                 int64_t first, int64_t V, CudaContext& ctx);

// *result (device) = loss sum and count over rows with a target in [0, V),
// from the reduced row_max (N) and stats (2N).
void vocab_xent_loss_sum_cuda(XentSum* result, const float* row_max, const float* stats,
                              const int64_t* targets, int64_t N, int64_t V, CudaContext& ctx);

// dlogits_local (N, Vl), overwritten; may alias logits_local.
template <typename T>
void vocab_xent_backward_cuda(T* dlogits_local, const T* logits_local, const int64_t* targets,
                              const float* row_max, const float* stats, int64_t N, int64_t Vl,
                              int64_t valid, int64_t first, int64_t V, double scale,
                              CudaContext& ctx);

}  // namespace loom
