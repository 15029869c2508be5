// Tensor-parallel regions: the four conjugate communication operators that
// bracket Megatron-style sharded layers (Shoeybi et al. 2019, Megatron-LM
// tensor_parallel/mappings.py), written out as forward/backward pairs.
//
//   copy_to_tp      Megatron "f": identity fwd, all-reduce(sum) bwd
//   reduce_from_tp  Megatron "g": all-reduce(sum) fwd, identity bwd
//   gather_from_tp  all-gather along the last dim fwd, split (keep own slice) bwd
//   scatter_to_tp   split along the last dim fwd, all-gather bwd
//
// Every collective runs on the `tp` Communicator passed in (the tensor-parallel
// group, ProcessGroups::tp) and is waited on before the call returns.
//
// Invariants:
// - Rank r of the tp group owns last-dim columns [r*D/tp, (r+1)*D/tp) of a
//   split tensor: the split is contiguous and in tp-rank order, and D must be a
//   multiple of the group size (an error otherwise, naming the sizes).
// - With a group of size 1 every call is a plain copy (or nothing when out ==
//   in): no collective is posted (picotron's `if tp_world_size == 1: return`).
// - `out` may equal `in` for copy_to_tp and reduce_from_tp (in place); the
//   gather/scatter calls change the shape and need distinct buffers.
// - Like the ops' activation gradients, every output here overwrites.
//
// Not here: the sharded layers themselves (parallel/tp_layers.h), the
// vocab-parallel embedding and cross-entropy (comm/tp_vocab.h), sequence
// parallelism (reduce-scatter/all-gather along the sequence dim), and any
// asynchronous overlap of these collectives with compute.
#pragma once

#include <cstdint>

#include "comm/comm.h"

namespace loom {

// Megatron "f": identity fwd. out (n) = in (n).
template <typename T>
void copy_to_tp_forward(T* out, const T* in, int64_t n, Communicator& tp);
// Megatron "f" bwd: dinp (n) = all_reduce(sum, tp) of dout (n).
template <typename T>
void copy_to_tp_backward(T* dinp, const T* dout, int64_t n, Communicator& tp);

// Megatron "g": out (n) = all_reduce(sum, tp) of in (n).
template <typename T>
void reduce_from_tp_forward(T* out, const T* in, int64_t n, Communicator& tp);
// Megatron "g" bwd: identity. dinp (n) = dout (n).
template <typename T>
void reduce_from_tp_backward(T* dinp, const T* dout, int64_t n, Communicator& tp);

// In place, the element type given at run time: buf (n) = all_reduce(sum,
// tp) of buf; what "f" bwd and "g" fwd post on activations of any type, in
// memory the group reaches (host memory for CPU groups, device memory for a
// device twin). Waited on, as everything here.
void tp_sum_inplace(void* buf, int64_t n, DType dtype, Communicator& tp);

// out (N, D) = concat over tp ranks of in (N, D/tp) along the last dim
// (all_gather on tp). D is the global (gathered) width.
template <typename T>
void gather_from_tp_forward(T* out, const T* in, int64_t N, int64_t D, Communicator& tp);
// dinp (N, D/tp) = this rank's columns of dout (N, D). No collective.
template <typename T>
void gather_from_tp_backward(T* dinp, const T* dout, int64_t N, int64_t D, Communicator& tp);

// out (N, D/tp) = this rank's columns of in (N, D). No collective.
template <typename T>
void scatter_to_tp_forward(T* out, const T* in, int64_t N, int64_t D, Communicator& tp);
// dinp (N, D) = concat over tp ranks of dout (N, D/tp) (all_gather on tp).
template <typename T>
void scatter_to_tp_backward(T* dinp, const T* dout, int64_t N, int64_t D, Communicator& tp);

}  // namespace loom
