// ZeRO-1/2 optimizer side: the job's optimizer (AdamW, LAMB or SGD,
// optim/flat_optimizer.h) over this dp rank's shard of the flat buffers, the global gradient norm over shards, the parameter all-gather,
// layout-free optimizer checkpoints, and the memory plan of each stage
// (ZeRO, Rajbhandari et al. 2020; llm.c zero.cuh; Megatron distributed optimizer).
//
// The shard is GradSync's: chunk r of every gradient bucket (grad_sync.h). A
// chunk may cut through a parameter, so weight decay and trainability are
// resolved per element: the shard is split into segments, each the
// intersection of one chunk with one trainable ParamTable row, carrying that
// row's decay flag. Frozen rows and alignment gaps are never updated.
//
// One optimizer step, all on the dp group:
//   GradSync::finalize()  reduce-scattered gradients in shard_grads()
//   clip_grad_norm()      sum of squares over the shard, all_reduce(sum) (f64)
//   step(lr)              the update on this shard (AdamW and SGD are
//                         elementwise, so the shard update is bitwise the
//                         unsharded one for the same gradients; LAMB sums its
//                         per-tensor norms over dp between its two passes),
//                         then all_gather of every bucket's chunks into the
//                         parameter buffer, so all ranks hold all parameters.
//
// Checkpoints: gather_state() returns the moments as global tensors named as
// AdamW::state_tensors() names them ("exp_avg.<param>", "exp_avg_sq.<param>"),
// so a state saved under any dp size / ZeRO stage loads into any other (and
// into the unsharded AdamW); load_state() keeps this rank's part.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/param_table.h"
#include "optim/adamw.h"
#include "optim/flat_optimizer.h"
#include "parallel/grad_sync.h"

namespace loom {

// Intersections of `pieces` with the table's trainable rows, in shard order.
std::vector<ShardSegment> shard_segments(const ParamTable& table,
                                         const std::vector<ShardPiece>& pieces, DecayPolicy decay);

class ZeroOptimizer {
  public:
    // `sync` (ZeRO-1 or ZeRO-2) provides the shard layout, the reduced
    // gradients and the dp group its buffers go over; `scalars`, the dp
    // group for host values (the norm; null: sync's). table, sync and
    // scalars must outlive this object.
    ZeroOptimizer(ParamTable& table, GradSync& sync, const OptimizerConfig& config,
                  Communicator* scalars = nullptr);
    // AdamW with `hp`.
    ZeroOptimizer(ParamTable& table, GradSync& sync, const AdamWParams& hp,
                  DecayPolicy decay = DecayPolicy::table);

    // Sum of squared reduced gradients over all ranks' shards (trainable
    // elements only); collective, every rank gets the same value.
    // `exclude`: flat ranges left out (pipeline stages: rows another stage counts).
    double grad_norm_sq(const std::vector<std::pair<int64_t, int64_t>>* exclude = nullptr) const;
    // torch clip_grad_norm_ on the global norm; returns the norm before clipping.
    double clip_grad_norm(double max_norm);
    // The reduced shard, once the sync has finished (GradSync::finalize), as
    // the norm, the clipping and the update read it: narrow (bf16, f16)
    // shards are widened to fp32 here, so unscaling and clipping multiply
    // fp32 values and lose nothing an in-place narrow multiply would.
    void take_grads();
    // Those gradients *= s (unscaling).
    void scale_grads(float s);
    // The update on this shard, then all-gather the parameters (collective). The
    // gradient shard is reused as the all-gather's send buffer: it is stale
    // afterwards (the next GradSync::begin_step clears it).
    void step(double lr);
    int64_t step_count() const { return opt_.step_count(); }
    const OptimizerConfig& config() const { return opt_.config(); }
    const std::vector<ShardSegment>& segments() const { return opt_.segments(); }
    int64_t shard_size() const { return sync_.shard_size(); }

    // Global moments by name (collective over dp: every rank gets them all).
    std::map<std::string, Tensor> gather_state() const { return opt_.state_tensors(); }
    // Keeps this rank's part of global moments (local); every trainable row
    // must be present with its shape.
    void load_state(const std::map<std::string, Tensor>& state, int64_t step) {
        opt_.load_state(state, step);
    }

  private:
    // Every rank's shard into the flat layout (flat_numel floats), over dp.
    void gather_flat(const float* shard, float* full) const;
    OptimizerShard optimizer_shard(DecayPolicy decay);

    ParamTable& table_;
    GradSync& sync_;
    Communicator& scalars_;
    // (dp * chunk) fp32, the padded bottom bucket's, in the backend's memory.
    std::shared_ptr<Storage> staging_;
    // Narrow gradients: the shard widened (take_grads), fp32, shard_size().
    std::shared_ptr<Storage> wide_;
    // The fp32 gradient shard: wide_, or the sync's own.
    ActPtr grads() const { return wide_ ? ActPtr(wide_->data(), DType::f32) : sync_.shard_grads(); }
    FlatOptimizer opt_;                   // over this rank's shard
};

// Bytes one rank holds for training state under a data-parallel layout.
struct DpMemoryPlan {
    ZeroStage zero = ZeroStage::none;
    int dp_size = 1;
    int64_t param_bytes = 0;       // flat fp32 parameters (+ a narrow compute copy; replicated)
    int64_t grad_bytes = 0;        // flat gradient buffer backward writes into
    // Reduced gradient shard (+ ZeRO-2 receive buffer) in the gradients' type,
    // + its fp32 widening when they are narrow.
    int64_t grad_shard_bytes = 0;
    int64_t optimizer_bytes = 0;   // Adam m and v (none for SGD)
    int64_t comm_bytes = 0;        // staging of the padded bottom bucket
    int64_t total_bytes() const;
    // Against plain DDP (ZeRO none) on the same dp size: positive = saved.
    int64_t saved_vs_ddp_bytes = 0;
    // "ZeRO-1 dp 4: params 1.2 MiB, grads 1.2 MiB + shard 0.3 MiB, optimizer
    //  0.6 MiB (... saved vs DDP)"
    std::string describe() const;
};
// `moments`: the optimizer keeps Adam's m and v (AdamW, LAMB; SGD none).
// `grads`: the gradients' type (a GPU's bf16 or fp16 under mixed precision:
// the flat buffer, the shard and the comm staging narrow, the shard widened
// to fp32 for the update); `compute_copy`: the table also keeps the
// parameters in that type for the modules.
DpMemoryPlan dp_memory_plan(int64_t flat_numel, int64_t bucket_elems, int dp_size, ZeroStage zero,
                            bool moments = true, DType grads = DType::f32,
                            bool compute_copy = false);

}  // namespace loom
