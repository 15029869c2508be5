// CUDA LAMB over tiles of the flat buffers: ops/lamb.h's contract, per-step
// constants and rounding (optim/lamb.h's formula; tiles from ops/lamb_tiles.h).
//
// Three launches, all deterministic (fixed-shape trees and fixed-order sums,
// no atomics):
//   lamb_moments_cuda   per tile: m, v updated in place; the tile's sums of
//                       p^2 and u^2 in fp64 (u = mh / (sqrt(vh) + eps) + wd*p);
//                       then per row the sum of its tiles' partials, in tile
//                       order, into row_sums (rows, 2).
//   (ZeRO: the caller all-reduces row_sums over dp here, so every rank sees
//    each tensor's whole norms although it holds only some of its elements.)
//   lamb_apply_cuda     per tile: trust ratio r = ||p|| / ||u|| of its row
//                       (1 when either is 0 or the row does not adapt),
//                       p -= float(lr * r) * u, with u recomputed from the new
//                       moments and the old p exactly as the first pass did;
//                       the bf16/f16 parameter copy refreshed in the same pass.
// The gradient is read as G (float, or the compute type) times grad_scale in
// fp32 (clipping, loss-scale removal: one rounding, as the CPU's scale_grads).
// The gradient and moment buffers are indexed by LambTile::state, the master
// weights and the copy by LambTile::param, so a ZeRO shard's state buffers
// need not mirror the flat layout.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "ops/lamb.h"

namespace loom {

// tiles (n_tiles) and row_begin (rows + 1) in device memory (LambTiles as
// planned); tile_sums (n_tiles, 2) is scratch; row_sums (rows, 2) receives
// sum p^2 and sum u^2 per row (0 for rows without tiles).
template <typename G>
void lamb_moments_cuda(const float* master, const G* grad, float* m, float* v,
                       const LambTile* tiles, int64_t n_tiles, const int64_t* row_begin,
                       int32_t rows, double* tile_sums, double* row_sums, const LambStep& s,
                       CudaContext& ctx, float grad_scale = 1.0f);

// copy: the compute-type parameter copy (indexed like master), or null (T = float).
template <typename T>
void lamb_apply_cuda(float* master, T* copy, const float* m, const float* v, const LambTile* tiles,
                     int64_t n_tiles, const double* row_sums, const LambStep& s, double lr,
                     CudaContext& ctx);

}  // namespace loom
