// DataParallel: what a training loop calls to run one optimizer step on a
// data-parallel group, whatever the ZeRO stage. It owns the gradient buckets
// (GradSync), the optimizer (replicated, or ZeroOptimizer sharded) and the
// model's grad-ready hook. The model code is the same for every layout.
//
// One step (ga micro-batches per rank; dp ranks see disjoint samples):
//   dp.begin_step();                           // zero grads
//   total = dp.sum(local_label_count);         // global count, before backward
//   loss = dp.run(micro, 1.0 / total);         // for each micro-batch k:
//       model.forward(mb[k], dropout keyed by global sample index);
//       dp.begin_micro_batch(k == ga - 1);
//       model.backward(1.0 / total);           // hook launches bucket reductions
//       dp.end_micro_batch();
//   dp.finalize_grads();                       // wait: summed (= mean) gradients
//   loss = dp.sum(local_loss_sum) / total;
//   norm = dp.clip_grad_norm(max_grad_norm);   // global norm over all ranks
//   dp.step(lr);                               // AdamW (+ ZeRO all-gather)
//
// Every call above is a collective on the dp group (sum, finalize, clip and
// step block; the micro-batch calls start nonblocking reductions), so all dp
// ranks make them in the same order. With dp size 1 and ZeRO none this is
// exactly the single-process step (the all-reduces are copies).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/comm.h"
#include "optim/adamw.h"
#include "parallel/grad_sync.h"
#include "parallel/pending_scale.h"
#include "parallel/stage_model.h"
#include "parallel/step_engine.h"
#include "parallel/zero.h"

namespace loom {

// Forward of one micro-batch (none for an empty one, B = 0), checking that
// the model counted the labels the loader did. The engines' shared first half.
LossSum forward_micro_batch(StageModel& model, const MicroBatch& m);

struct DpOptions {
    ZeroStage zero = ZeroStage::none;
    double bucket_size_mb = 25.0;  // HF ddp_bucket_cap_mb
    bool overlap = true;           // reduce buckets while backward runs
    int max_in_flight_at_end = 0;  // GradSyncOptions::max_in_flight_at_end
    // dp > 1: the model keeps its word-embedding lookup's gradient as rows
    // (StageModel::set_sparse_embedding_grad) so the table's range is reduced
    // during backward; the rows are exchanged after. (Also without overlap,
    // so that overlap never changes a bit of the result.) Host-addressable
    // tables only: a device table reduces the table densely.
    bool sparse_embedding_grad = true;
    // The dp group's twin that reduces the table's backend memory (NCCL on
    // the GPU's stream for a GPU table); null: dp itself (host memory).
    // Scalars (label counts, norms) always go over dp. Must outlive the engine.
    Communicator* buffers = nullptr;
};

class DataParallel : public StepEngine {
  public:
    // Installs the grad-ready hook on `model` (removed by the destructor).
    // model and dp must outlive this object.
    // `optimizer`: the job's (AdamW, LAMB or SGD); replicated under ZeRO
    // none (every rank holds the same reduced gradients, so any optimizer
    // stays in step across replicas), sharded under ZeRO-1/2.
    DataParallel(StageModel& model, Communicator& dp, const OptimizerConfig& optimizer,
                 const DpOptions& options);
    // AdamW with `hp`.
    DataParallel(StageModel& model, Communicator& dp, const AdamWParams& hp, DecayPolicy decay,
                 const DpOptions& options)
        : DataParallel(model, dp, adamw_config(hp, decay), options) {}
    ~DataParallel();
    DataParallel(const DataParallel&) = delete;
    DataParallel& operator=(const DataParallel&) = delete;

    int dp_rank() const { return dp_.rank(); }
    int dp_size() const { return dp_.size(); }
    ZeroStage zero() const { return opt_.zero; }

    // Copies rank 0's parameters to every dp rank (collective): call after
    // loading or initialising, so replicas start identical whatever happened.
    void broadcast_parameters();
    // all_reduce(sum) of one double on the dp group (blocking).
    double sum(double local);

    void begin_step() override;
    // The micro-batches through the model, each bracketed by begin/end_micro_batch
    // (the last one's backward launches the bucket reductions).
    double run(const std::vector<MicroBatch>& micro, double loss_scale) override;
    void begin_micro_batch(bool last);
    void end_micro_batch();
    // Waits for every bucket: the summed gradients (backward already scaled
    // by 1 / global count, so the sum is the mean).
    void finalize_grads() override;
    // Global gradient norm over every rank's (reduced) gradients; clips to
    // max_norm when max_norm > 0. Returns the norm before clipping.
    double clip_grad_norm(double max_norm) override;
    // Sum of squared reduced gradients over every dp rank (collective under
    // ZeRO), leaving out the flat ranges in `exclude` (pipeline stages: rows
    // another stage counts).
    double grad_norm_sq(const std::vector<std::pair<int64_t, int64_t>>& exclude);
    // Multiplies the gradients step() will read by s: the whole reduced
    // buffer (replicated) or this rank's shard (ZeRO-1/2). fp16 unscaling.
    void scale_grads(float s) override;
    void step(double lr) override;
    int64_t step_count() const;

    // Layout-free optimizer state, AdamW::state_tensors names (collective
    // under ZeRO: gathers every shard).
    std::map<std::string, Tensor> optimizer_state() const;
    void load_optimizer_state(const std::map<std::string, Tensor>& state, int64_t step);

    // False for SGD, whose checkpoint holds the step count only.
    bool optimizer_has_state() const {
        return (zero_ ? zero_->config() : whole_->config()).kind != OptimizerKind::sgd;
    }
    DpMemoryPlan memory_plan() const;
    const GradSyncStats& stats() const { return sync_->stats(); }
    GradSync& grad_sync() { return *sync_; }
    // Whether the model keeps sparse embedding rows on reducing micro-batches.
    bool sparse_embedding_grad() const { return sparse_; }

  private:
    StageModel& model_;
    Communicator& dp_;
    DpOptions opt_;
    std::unique_ptr<GradSync> sync_;
    std::unique_ptr<FlatOptimizer> whole_;  // ZeRO none
    std::unique_ptr<ZeroOptimizer> zero_;   // ZeRO-1/2
    // Replicated gradients narrower than f32 (a GPU's bf16 or fp16):
    // unscaling and clipping go into pending_ (parallel/pending_scale.h).
    bool defer_scaling() const;
    PendingScale pending_;
    bool sparse_ = false;               // DpOptions::sparse_embedding_grad, if the model can
    bool sparse_now_ = false;           // this micro-batch keeps rows
};

}  // namespace loom
