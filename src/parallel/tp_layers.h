// Tensor-parallel linear layers (Megatron ColumnParallelLinear /
// RowParallelLinear) as free functions over a rank's slices, the reference
// nn/linear.h's sharded Linear is tested against. The shard maps that cut a
// global weight into slices are in nn/tp_shard.h.
//
//   column-parallel  y_local (N, OC/tp) = f(x) @ W_local + b_local
//                    rank r holds output features [r*OC/tp, (r+1)*OC/tp) of
//                    the weight and bias; Megatron "f" on the input (identity
//                    fwd, all-reduce(sum) of dx on tp bwd). The output stays
//                    split; gather_from_tp (tp_regions.h) joins it if needed.
//   row-parallel     y (N, OC) = g(x_local @ W_local) + b
//                    rank r holds input features [r*C/tp, (r+1)*C/tp) of the
//                    weight; Megatron "g" all-reduces (sum, on tp) the partial
//                    products and the bias, replicated on every rank, is added
//                    once AFTER the reduction (added before, it would count tp
//                    times). Backward needs no collective: dy is replicated.
// Column-then-row (the MLP, attention's qkv then proj) needs exactly one
// all-reduce per direction, the Megatron pairing.
//
// Weight layouts (ops/matmul.h): out_in (OC, C) is torch.nn.Linear, in_out
// (C, OC) is GPT-2's Conv1D. Output features are rows of an out_in weight and
// columns of an in_out weight, so which tensor dim is split depends on both the
// role and the layout (tp_weight_split_dim). The local weight is always a
// contiguous matrix in the same layout, so the unmodified matmul_forward /
// matmul_backward run on it with OC/tp (column) or C/tp (row).
//
// Packed (fused) weights: BERT's fused query/key/value and GPT-2's c_attn are
// one (3C, C) or (C, 3C) matrix made of three blocks along the output dim. A
// rank must hold heads [r*NH/tp, (r+1)*NH/tp) of EACH block, so a TpSplit
// lists the block sizes and every block is split on its own; the local matrix
// is (3C/tp, C) laid out q_local, k_local, v_local, and the local GEMM output
// (N, 3C/tp) is exactly what attention over NH/tp heads reads.
//
// Accumulation follows the ops: dweight and dbias accumulate (+=), dinp
// overwrites. Collectives run on the `tp` Communicator passed in; with a group
// of size 1 these are the plain matmul ops.
//
// Not here: the ParamTable wiring (which rows are column/row: the model's
// tp_plan), the attention math itself, sequence parallelism, and sharding of
// tensors with more than two dims.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/comm.h"
#include "core/tensor.h"
#include "nn/linear.h"
#include "nn/tp_shard.h"
#include "ops/matmul.h"

namespace loom {


// Column-parallel linear, Megatron ColumnParallelLinear with gather_output off.
// weight_local: the rank's slice per tp_linear_weight_split(column, ...), i.e.
// (OC/tp, C) for out_in or (C, OC/tp) for in_out; bias_local (OC/tp) or null.
template <typename T>
void column_parallel_linear_forward(T* out_local,  // (N, OC/tp)
                                    const T* inp,  // (N, C), replicated on tp
                                    const T* weight_local, const T* bias_local, int64_t N,
                                    int64_t C, int64_t OC, WeightLayout layout, Communicator& tp);
// dinp (N, C) overwritten with the full input gradient (all_reduce sum on tp);
// dweight_local, dbias_local (or null) accumulate.
template <typename T>
void column_parallel_linear_backward(T* dinp, T* dweight_local, T* dbias_local,
                                     const T* dout_local,  // (N, OC/tp)
                                     const T* inp,         // (N, C)
                                     const T* weight_local, int64_t N, int64_t C, int64_t OC,
                                     WeightLayout layout, Communicator& tp);

// Row-parallel linear, Megatron RowParallelLinear with input_is_parallel on.
// weight_local: (OC, C/tp) for out_in or (C/tp, OC) for in_out; bias (OC),
// replicated, or null.
template <typename T>
void row_parallel_linear_forward(T* out,              // (N, OC), replicated on tp
                                 const T* inp_local,  // (N, C/tp)
                                 const T* weight_local, const T* bias, int64_t N, int64_t C,
                                 int64_t OC, WeightLayout layout, Communicator& tp);
// dinp_local (N, C/tp) overwritten or null; dweight_local and dbias (the
// replicated bias: every rank computes the same sum) accumulate. No collective.
template <typename T>
void row_parallel_linear_backward(T* dinp_local, T* dweight_local, T* dbias,
                                  const T* dout,       // (N, OC), replicated on tp
                                  const T* inp_local,  // (N, C/tp)
                                  const T* weight_local, int64_t N, int64_t C, int64_t OC,
                                  WeightLayout layout, Communicator& tp);

}  // namespace loom
