// Shard maps: how a tensor-parallel rank's slice of a weight sits in the
// global tensor, to cut a checkpoint's global tensor into this rank's slice
// and to put the slices back together when saving.
//
// Weight layouts (ops/matmul.h): out_in (OC, C) is torch.nn.Linear, in_out
// (C, OC) is GPT-2's Conv1D. Output features are rows of an out_in weight and
// columns of an in_out weight, so which tensor dim is split depends on both the
// role and the layout (tp_weight_split_dim).
//
// Packed (fused) weights: BERT's fused query/key/value and GPT-2's c_attn are
// one (3C, C) or (C, 3C) matrix made of three blocks along the output dim. A
// rank must hold heads [r*NH/tp, (r+1)*NH/tp) of EACH block, so a TpSplit
// lists the block sizes and every block is split on its own; the local matrix
// is (3C/tp, C) laid out q_local, k_local, v_local.
//
// Not here: the layers that run on the slices (parallel/tp_layers.h,
// nn/linear.h) and sharding of tensors with more than two dims.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "comm/comm.h"
#include "core/tensor.h"
#include "nn/linear.h"
#include "nn/param_table.h"
#include "ops/matmul.h"

namespace loom {

// How a 2-D (rows, cols) tensor is split over a tp group: along `dim`, with
// that dim made of consecutive blocks (empty = one block of the whole dim),
// each block split in tp equal contiguous parts; rank r's local tensor holds
// part r of every block, in block order, along `dim`. A 1-D bias of OC is
// {rows = OC, cols = 1, dim = 0}.
struct TpSplit {
    int64_t rows = 0, cols = 0;   // global shape
    int dim = 0;                  // 0: rows are split, 1: columns are split
    std::vector<int64_t> blocks;  // sizes along `dim`, summing to its length

    int64_t local_rows(int tp_size) const;
    int64_t local_cols(int tp_size) const;
    int64_t local_numel(int tp_size) const { return local_rows(tp_size) * local_cols(tp_size); }
    // Throws unless every block (the whole dim when no blocks) divides by tp_size.
    void check(int tp_size) const;
};

// The tensor dim of a linear weight that holds the split features:
// column + out_in -> 0, column + in_out -> 1, row + out_in -> 1, row + in_out -> 0.
int tp_weight_split_dim(TpRole role, WeightLayout layout);

// The split of a linear's weight (C in, OC out) for `role` (column or row).
// `out_blocks` (column only): sizes of packed outputs, e.g. {C, C, C} for qkv.
TpSplit tp_linear_weight_split(TpRole role, WeightLayout layout, int64_t C, int64_t OC,
                               std::vector<int64_t> out_blocks = {});
// The split of a column-parallel bias (OC). A row-parallel bias is replicated:
// every rank holds the whole vector (no split to describe).
TpSplit tp_linear_bias_split(int64_t OC, std::vector<int64_t> out_blocks = {});

// The split a sharded ParamRow records (ShardSpec with its global shape):
// 1-D rows are {global[0], 1, dim 0}, 2-D rows split along shard.axis.
TpSplit tp_row_split(const ShardSpec& shard);

// A sharded ParamRow's tensors, split or vocab kind alike (f32): this rank's
// slice of the global tensor (checkpoint loading, init), and the global
// tensor on every rank of tp from the slices (all_gather on tp; saving).
Tensor tp_shard_row_tensor(const ShardSpec& shard, const Tensor& global);
// Where a sharded row's slice lies in the global tensor (row-major elements):
// fn(global offset, local offset, length) for every contiguous run of this
// rank's part. A vocabulary slice is one run of its rows inside the
// vocabulary; its padded rows past it (the last rank's) have none, and the
// slice holds zeros there. Lets a rank fill its slice without the whole tensor.
void tp_row_runs(const ShardSpec& shard, const std::function<void(int64_t, int64_t, int64_t)>& fn);
Tensor tp_assemble_row_tensor(const ShardSpec& shard, const Tensor& local, Communicator& tp);
// The global tensor on tp rank `root` only (an empty Tensor elsewhere): the
// other ranks send their slices and never hold the whole tensor. For
// checkpoints and exports that one rank writes; every rank of tp must call it.
Tensor tp_gather_row_tensor(const ShardSpec& shard, const Tensor& local, Communicator& tp,
                            int root);

// local (split.local_rows, split.local_cols) <- rank tp_rank's part of
// global (rows, cols). Checkpoint loading: every rank reads the global tensor.
template <typename T>
void tp_shard_for_rank(T* local, const T* global, const TpSplit& split, int tp_size, int tp_rank);
// global (rows, cols) part of rank tp_rank <- local; the inverse of the above.
template <typename T>
void tp_unshard_from_rank(T* global, const T* local, const TpSplit& split, int tp_size,
                          int tp_rank);
// global (rows, cols) on every rank <- all ranks' local slices (all_gather on
// tp). Checkpoint saving and tests; every rank of tp must call it.
template <typename T>
void tp_assemble(T* global, const T* local, const TpSplit& split, Communicator& tp);

// Tensor forms of the two above for checkpoint IO (f32 or f64; 1-D or 2-D
// with split's global shape). Return a new tensor named like the input:
// this rank's slice, or the global tensor (the same on every rank of tp).
Tensor tp_shard_tensor(const Tensor& global, const TpSplit& split, int tp_size, int tp_rank);
Tensor tp_assemble_tensor(const Tensor& local, const TpSplit& split, Communicator& tp);

}  // namespace loom
