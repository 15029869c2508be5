// FlatOptimizer: AdamW, LAMB and SGD, each written once, over a ParamTable's
// flat buffers on any backend (backend/backend.h): the update plan, the
// state, the checkpoint form and the ZeRO shard live here, the arithmetic in
// the backend's kernels (ops/device_ops.h). The CPU optimizers (adamw.h,
// lamb.h, sgd.h) and ZeRO's (parallel/zero.h) are this class, on whichever
// backend the table lives.
//
// Whole buffer: the state mirrors the flat layout and the update reads the
// target's gradients (fp32, or the compute type on a GPU), refreshing the
// compute copy in the same pass when there is one. Shard (set_shard, ZeRO
// 1/2): the state shrinks to this rank's shard, the update reads the reduced
// fp32 gradient shard and writes only this rank's pieces of the master
// weights; bringing every rank's pieces back (and refreshing a compute copy)
// is the caller's all-gather. LAMB's per-tensor sums are partial on a shard:
// they are summed over dp between its two passes, so every rank applies each
// tensor's whole trust ratio. AdamW and SGD are elementwise, so a shard
// update is bitwise the unsharded one for the same gradients.
//
// Invariant: state_tensors() is layout-free (torch's names, one global
// tensor per trainable row), so a state saved whole or sharded, on either
// device, loads into any other.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/storage.h"
#include "core/tensor.h"
#include "nn/param_table.h"
#include "ops/device_ops.h"
#include "optim/optimizer.h"

namespace loom {

enum class DecayPolicy {
    table,  // ParamRow::decay decides
    all,    // every trainable parameter decays
};

struct OptimizerConfig {
    OptimizerKind kind = OptimizerKind::adamw;
    // beta1, beta2, eps and weight_decay (SGD reads weight_decay only; lr
    // comes with each step).
    AdamWParams hp;
    bool lamb_bias_correction = true;  // false: ALBERT's TF lamb_optimizer.py
    DecayPolicy decay = DecayPolicy::table;
};

// A run of the flat buffers inside one trainable row, as one rank updates it.
struct ShardSegment {
    int64_t flat = 0;   // offset in the flat parameter buffer
    int64_t shard = 0;  // offset in the state (and shard gradient) buffers
    int64_t n = 0;      // elements
    bool decay = true;
    int row = -1;  // the ParamTable row it lies in (per-tensor optimizers: LAMB)
};

// ZeRO: the part of the flat buffers this rank updates (parallel/zero.h).
struct OptimizerShard {
    std::vector<ShardSegment> segments;
    int64_t numel = 0;             // length of the shard buffers
    const float* grads = nullptr;  // the reduced fp32 gradient shard (backend memory)
    // In-place sum over dp of n doubles in backend memory (LAMB's row sums).
    std::function<void(double* buf, int64_t n)> all_reduce_sum;
    // Every rank's shard of a state buffer into `flat` (flat_numel floats,
    // zero-filled, backend memory). Collective.
    std::function<void(const float* shard, float* flat)> gather_flat;
};

class FlatOptimizer : public Optimizer {
  public:
    // `target`: the table's buffers on `backend` (master weights, gradients
    // and, on a GPU, the compute copy); m and v are ignored (owned here).
    // With `shard`, the state is the shard's from the start (set_shard).
    FlatOptimizer(Backend& backend, const ParamTable& table, const OptimizerConfig& config,
                  const UpdateBuffers& target, std::optional<OptimizerShard> shard = {});
    // The table's own buffers on its backend (ParamTable::update_buffers).
    FlatOptimizer(ParamTable& table, const OptimizerConfig& config,
                  std::optional<OptimizerShard> shard = {});

    void step(double lr) override { step(lr, 1.0f); }
    // grad_scale multiplies every gradient as it is read (clipping, loss scale).
    void step(double lr, float grad_scale);
    int64_t step_count() const override { return step_; }
    // Collective when sharded (every rank must call it).
    std::map<std::string, Tensor> state_tensors() const override;
    void load_state(const std::map<std::string, Tensor>& state, int64_t step) override;

    // Shrinks the state to `shard`, keeping this rank's part of it.
    void set_shard(OptimizerShard shard);
    bool sharded() const { return shard_.has_value(); }
    const OptimizerConfig& config() const { return config_; }
    Backend& backend() const { return backend_; }
    // The segments the update covers (one per row piece, before merging).
    const std::vector<ShardSegment>& segments() const { return segments_; }
    // Bytes of state on the backend (the moments).
    int64_t state_bytes() const {
        return has_moments() ? 2 * state_n_ * int64_t(sizeof(float)) : 0;
    }
    // LAMB: the last step's sums of p^2 and u^2 per row, (rows, 2), host copy.
    std::vector<double> lamb_row_sums() const;

  private:
    bool has_moments() const { return config_.kind != OptimizerKind::sgd; }
    void check_shard(const OptimizerShard& shard) const;
    void plan(std::vector<ShardSegment> segs);
    UpdateBuffers buffers() const;

    Backend& backend_;
    const ParamTable& table_;
    OptimizerConfig config_;
    UpdateBuffers target_;
    std::optional<OptimizerShard> shard_;
    std::shared_ptr<Storage> m_, v_;  // (state_n_) each, backend memory
    int64_t state_n_ = 0;
    // Whole buffer: the flat offset of state element 0. The state spans the
    // trainable rows only (LoRA groups them at the top: ParamTable::
    // group_trainable), so a frozen base holds no moments.
    int64_t state_base_ = 0;
    std::vector<ShardSegment> segments_;
    std::vector<UpdateRun> runs_;  // segments_ merged for the elementwise kernels
    // LAMB's tile plan and sums, backend memory.
    std::shared_ptr<Storage> tiles_, row_begin_, tile_sums_, row_sums_;
    int64_t n_tiles_ = 0;
    int64_t step_ = 0;
};

}  // namespace loom
