// GpuPipeline: PipelineParallel's step on the GPU executor (models/cuda/
// cuda_model.h). It runs the same action list (pipeline_schedule.h, the same
// make_schedule call) with the same slot bookkeeping and message tags, but the
// hidden states and their gradients stay on the device: they travel between
// stages with send/recv on the device twin of the pp group (NCCL), in the
// compute type.
//
// The CPU PipelineParallel stays the layout: its model instances (one per
// chunk and micro-batch in flight) are what the executor instances replay,
// and it keeps the shared rows, the norm's excluded ranges, the gathers and
// the checkpoints. The owner executor (built for layout.model()) holds the
// stage's parameters, gradients and optimizer and runs nothing itself; each
// instance (DeviceStage::stage_instance) is one set of activations, so the
// owner's data-parallel sync sees no backward until the step's reduction.
//
// One step, every call collective on pp:
//   loss_sum = pipe.run(micro, 1.0 / global_count);  // every pp rank gets it
//   pipe.reduce_shared_rows();                        // tied rows summed on pp
//   then the dp reduction of the owner's buffer, the global norm
//   (layout.global_norm_sq) and the owner's step.
//
// Ordering: a communication batch is posted between group_start/group_end
// and the host waits for it (bounded by the group's timeout) before the next
// action, as PipelineParallel::run does; the twin orders its operations after
// the executor's stream (DeviceStage::attach_group), so a send reads the
// finished output and the next forward reads a finished receive. NCCL matches
// point-to-point messages by posting order per pair of ranks, not by tag:
// pipeline_sim.h proves every schedule's lists match in that order. Messages
// both ends skip together: empty micro-batches (B = 0), and the gradients of
// micro-batches without labels (no backward runs for them on any stage).
//
// What it does not do yet: overlap the host's posting with the device
// (each batch blocks the host), or start the dp reduction during the
// pipeline's last backward.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/comm.h"
#include "parallel/device_stage.h"
#include "parallel/pipeline_parallel.h"

namespace loom {

class GpuPipeline {
  public:
    // `owner`: the stage's executor, built for layout.model(). `pp_device`:
    // the device twin of the pp group (same ranks); `pp_host`: the pp group
    // itself, for the loss. All must outlive this object.
    GpuPipeline(DeviceStage& owner, PipelineParallel& layout, Communicator& pp_device,
                Communicator& pp_host);
    ~GpuPipeline();
    GpuPipeline(const GpuPipeline&) = delete;
    GpuPipeline& operator=(const GpuPipeline&) = delete;

    // The step's micro-batches through the schedule; gradients accumulate
    // d(loss_scale * loss) in the owner's buffer. Returns the sum of the
    // per-example losses over this replica's micro-batches (all-reduced on
    // pp, so every stage returns it).
    double run(const std::vector<MicroBatch>& micro, double loss_scale);
    // Rows several stages hold (tied embeddings, ALBERT's shared layer): every
    // holder's gradient becomes the sum over pp (stages without a row add
    // zeros), as PipelineParallel::finalize_grads does before the dp step.
    void reduce_shared_rows();
    int n_instances() const { return int(instances_.size()); }

  private:
    DeviceStage& owner_;
    PipelineParallel& layout_;
    Communicator& pp_;
    Communicator& pp_host_;
    // (chunks x slots) chunk c's slot s at c * n_slots + s, as layout's models.
    std::vector<std::unique_ptr<DeviceStage>> instances_;
};

}  // namespace loom
