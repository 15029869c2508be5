// PipelineParallel: one pipeline stage of one data-parallel replica. It runs a
// step's micro-batches through the schedule's action list (pipeline_schedule.h),
// sends activations forward and their gradients back on the pp group, sums the
// gradients of rows several stages hold (tied embeddings on the first and last
// stage, ALBERT's shared layer on every stage) on the pp group, then hands the
// stage's flat gradient buffer to DataParallel (dp group: all-reduce or ZeRO).
//
// The stage's model is built for a ModelPart (models/model_placement.h): its
// ParamTable lists every row of the model but holds memory only for the
// stage's rows, so the optimizer, ZeRO and the buffers are the stage's own.
// One model instance per micro-batch in flight (schedule_max_in_flight), all
// sharing the first instance's parameter and gradient buffers: each instance
// is one set of saved activations.
//
// One step, every call collective on pp and dp:
//   pp.begin_step();
//   loss_sum = pp.run(micro_batches, 1.0 / global_count);   // every pp rank gets it
//   pp.finalize_grads();
//   norm = pp.clip_grad_norm(max_norm);                      // over all stages and replicas
//   pp.step(lr);
//
// Interleaved schedules: the rank runs n_virtual model chunks (chunk c is
// global stage c * pp + rank, ModelPart::also_hold makes every chunk's
// instance hold all of the rank's rows), each with its own instances.
//
// Tensor parallelism: the stage models may be built for a tp slice
// (ModelPlacement::tp); the linears then run Megatron's regions on that tp group
// themselves. Here: the grad norm sums sharded rows over tp and counts
// replicated rows once (tp rank 0's), and the gathers assemble sharded rows
// into global tensors (all_gather on tp), so checkpoints stay layout-free.
// With tp 1 and pp 1 this is a plain data-parallel trainer.
//
// What it deliberately does not do yet: overlapping the dp reduction with the
// pipeline's backward (the dp reduction starts after the last micro-batch),
// and ZeRO-2's per-micro-batch gradient release (the whole step counts as one
// micro-batch).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "comm/comm.h"
#include "core/storage.h"
#include "parallel/dp_step.h"
#include "parallel/model_part.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/step_engine.h"

namespace loom {

// Stage s of n: its layer applications [begin, end) out of n_apps, split as
// evenly as possible (earlier stages take the extra ones), or by `partition`
// (applications per stage, summing to n_apps) when it is not empty.
ModelPart pipeline_stage_part(int64_t n_apps, int n_stages, int stage,
                              const std::vector<int64_t>& partition = {});
// Chunk `chunk` of pipeline rank `pp_rank` under n_virtual chunks per rank:
// global stage chunk * pp_size + pp_rank of pp_size * n_virtual, holding the
// rows of the rank's other chunks too.
ModelPart pipeline_chunk_part(int64_t n_apps, int pp_size, int n_virtual, int pp_rank, int chunk,
                              const std::vector<int64_t>& partition = {});

// What the first and the last stage compute besides their layer applications,
// in units of one layer application's forward + backward FLOPs per token.
struct StageExtras {
    double first = 0;  // embeddings (a lookup: ~0; ALBERT's E -> C mapping)
    double last = 0;   // final norm and task head (GPT-2's LM head: several layers)
};
// The estimate for a model: models/stage_extras.h.
// Applications per stage (each >= 1, summing to n_apps) that minimise the
// busiest stage's cost (applications + extras): the default partition. With
// no extras it is the even split, earlier stages taking the extra ones.
std::vector<int64_t> balanced_partition(int64_t n_apps, int n_stages, const StageExtras& extras);

class PipelineParallel : public StepEngine {
  public:
    // `stage_models`: this rank's model instances, n_virtual chunks x the same
    // number each (chunk c's at [c * n, (c + 1) * n)), built with each chunk's
    // part; the first owns the buffers, the others are made to share them.
    // pp and dp must outlive this object.
    // `pp_buffers`: the pp group over the stages' backend memory (NCCL on
    // its stream for a GPU; null: pp itself), which carries the activations,
    // their gradients and the shared rows' sums; scalars go over pp.
    PipelineParallel(std::vector<std::unique_ptr<StageModel>> stage_models, Communicator& pp,
                     Communicator& dp, const OptimizerConfig& optimizer, DpOptions dp_options,
                     ScheduleKind kind, int n_virtual = 1, Communicator* pp_buffers = nullptr);
    // The same from models of a type derived from StageModel (models/'s Model).
    template <class M>
    PipelineParallel(std::vector<std::unique_ptr<M>> stage_models, Communicator& pp,
                     Communicator& dp, const OptimizerConfig& optimizer, DpOptions dp_options,
                     ScheduleKind kind, int n_virtual = 1, Communicator* pp_buffers = nullptr)
        : PipelineParallel(as_stages(std::move(stage_models)), pp, dp, optimizer, dp_options, kind,
                           n_virtual, pp_buffers) {}
    ~PipelineParallel();
    PipelineParallel(const PipelineParallel&) = delete;
    PipelineParallel& operator=(const PipelineParallel&) = delete;

    StageModel& model() { return *models_[0]; }
    const StageModel& model() const { return *models_[0]; }
    DataParallel& data_parallel() { return *dp_; }
    int stage() const { return pp_.rank(); }
    int n_stages() const { return pp_.size(); }
    int n_virtual() const { return n_virtual_; }
    // Chunk c runs the embeddings / the head.
    bool is_first(int chunk) const { return chunk == 0 && stage() == 0; }
    bool is_last(int chunk) const { return chunk == n_virtual_ - 1 && stage() == n_stages() - 1; }
    int n_slots() const { return int(models_.size()) / n_virtual_; }  // per chunk
    // Chunk c's model instance `slot` (sharing model()'s buffers).
    StageModel& instance(int chunk, int slot) {
        return *models_[size_t(chunk * n_slots() + slot)];
    }
    ScheduleKind kind() const { return kind_; }
    // Parameters each pipeline rank holds (all its chunks), from the table.
    std::vector<int64_t> params_per_stage() const;
    // Rows held by more than one stage (their gradients are summed on pp).
    const std::vector<int>& shared_rows() const { return shared_rows_; }

    void begin_step() override;
    // The step's micro-batches through the schedule. Returns the sum of the
    // per-example losses over this replica's micro-batches (all-reduced on
    // pp, so every stage returns it). Gradients accumulate d(scale * loss).
    double run(const std::vector<MicroBatch>& micro, double loss_scale) override;
    // Shared rows summed on pp, then the dp reduction (DataParallel).
    void finalize_grads() override;
    // Global norm over every stage and replica (shared rows counted once);
    // clips to max_norm when max_norm > 0. Returns the norm before clipping.
    double clip_grad_norm(double max_norm) override;
    void scale_grads(float s) override { dp_->scale_grads(s); }
    void step(double lr) override { dp_->step(lr); }
    int64_t step_count() const { return dp_->step_count(); }

    // Every row of the whole model by HF name (collective on pp and, under
    // ZeRO, dp): each row comes from the lowest stage that holds it. With
    // `to_all` false only pp stage 0 receives them (the others get an empty
    // map), so a checkpoint or an export never holds the whole model on
    // every rank; only replica 0 (dp rank 0) gathers then.
    std::map<std::string, Tensor> gather_params(bool to_all = true) const;
    std::map<std::string, Tensor> gather_optimizer_state(bool to_all = true) const;
    // Keeps this stage's rows of a whole model's optimizer state (local).
    void load_optimizer_state(const std::map<std::string, Tensor>& state, int64_t step);

  private:
    // The global sum of squares from this rank's, which leaves out
    // norm_excluded_ (shared rows a lower stage counts; rows tp replicates,
    // on tp ranks > 0): summed on pp, then tp.
    double global_norm_sq(double local_sq);
    // gather_optimizer_state from this stage's moments (by torch's names).
    std::map<std::string, Tensor> gather_optimizer_state(const std::map<std::string, Tensor>& local,
                                                         bool to_all) const;
    // This rank's tensor-parallel slices of a whole model's moments (the
    // others as they are).
    std::map<std::string, Tensor> local_optimizer_state(
        const std::map<std::string, Tensor>& state) const;
    // Lowest stage holding row i, or -1 (no stage: cannot happen for a built model).
    int holder(int row) const;
    // Each named tensor, whole (tp slices assembled), from the holder of its
    // row: to every rank (to_all), or to tp rank 0 of stage 0 only.
    std::map<std::string, Tensor> gather_rows(
        const std::map<std::string, Tensor>& local,
        const std::vector<std::pair<std::string, int>>& names_rows, bool to_all) const;

    template <class M>
    static std::vector<std::unique_ptr<StageModel>> as_stages(std::vector<std::unique_ptr<M>> ms) {
        std::vector<std::unique_ptr<StageModel>> out;
        for (auto& m : ms) out.push_back(std::move(m));
        return out;
    }
    std::vector<std::unique_ptr<StageModel>> models_;
    Communicator& pp_;
    Communicator& pp_buf_;
    Communicator* tp_ = nullptr;  // the stage models' tp group; null: tp 1
    std::unique_ptr<DataParallel> dp_;
    ScheduleKind kind_;
    int n_virtual_ = 1;
    int64_t C_ = 0;
    std::vector<std::vector<uint8_t>> holds_;  // (stages, rows) row held (local) by stage
    std::vector<int> shared_rows_;             // rows held by several stages
    // Flat ranges of shared rows this stage holds but does not own (counted
    // by a lower stage in the norm), and on tp ranks other than 0 the rows
    // tp replicates (Megatron's "not a tensor-parallel duplicate" rule).
    std::vector<std::pair<int64_t, int64_t>> norm_excluded_;
    // The stages' backend and activation type: the messages' memory and type.
    Backend* be_ = nullptr;
    DType act_ = DType::f32;
    // Per (chunk, micro-batch) message buffers on be_, kept across steps
    // (first touch is slow); index chunk * n_micro + micro.
    struct Message {
        std::shared_ptr<Storage> mem;
        int64_t capacity = 0;  // elements
    };
    std::vector<Message> act_in_, act_out_, grad_in_, grad_out_;
    std::shared_ptr<Storage> shared_buf_;  // the shared rows' gradients, packed
};

}  // namespace loom
