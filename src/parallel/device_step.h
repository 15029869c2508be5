// DeviceStep: the StepEngine (step_engine.h) of a GPU executor, in one
// process, data parallel over NCCL (GpuGradSync), or tensor and pipeline
// parallel (GpuPipeline on PipelineParallel's layout), so the trainer's step
// is the same code on either device.
//
// The gradients are never rescaled in place: scale_grads and clipping
// multiply one pending factor that step() hands the update (DeviceStage::
// step's grad_scale), which reads each gradient once. The norm is computed
// once per step and reused when the trainer asks again (fp16's second,
// clipping call).
#pragma once

#include <optional>
#include <vector>

#include "parallel/device_stage.h"
#include "parallel/gpu_grad_sync_api.h"
#include "parallel/pending_scale.h"
#include "parallel/step_engine.h"

namespace loom {

class GpuPipeline;
class PipelineParallel;

class DeviceStep final : public StepEngine {
  public:
    // `sync` (data parallel), `pipe` and `layout` (tensor or pipeline
    // parallel) may be null; all must outlive this object.
    DeviceStep(DeviceStage& stage, GpuGradSync* sync, GpuPipeline* pipe, PipelineParallel* layout);

    void begin_step() override;
    double run(const std::vector<MicroBatch>& micro, double loss_scale) override;
    void finalize_grads() override;
    void scale_grads(float s) override { pending_.scale(double(s)); }
    double clip_grad_norm(double max_norm) override;
    void step(double lr) override;

  private:
    DeviceStage& stage_;
    GpuGradSync* sync_;
    GpuPipeline* pipe_;
    PipelineParallel* layout_;
    PendingScale pending_;         // what the update multiplies the gradients by
    std::optional<double> sq_;     // this step's sum of squares, once computed
    bool leftover_grads_ = false;  // a skipped step (fp16 overflow) left its gradients
};

}  // namespace loom
