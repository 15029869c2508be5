// DeviceStep: the micro-batch loop, the device reduction, the norm and the
// update of a GPU executor.
#include "parallel/device_step.h"

#include <cmath>

#include "core/check.h"
#include "optim/grad_clip.h"
#include "parallel/gpu_pipeline.h"
#include "parallel/pipeline_parallel.h"

namespace loom {

DeviceStep::DeviceStep(DeviceStage& stage, GpuGradSync* sync, GpuPipeline* pipe,
                       PipelineParallel* layout)
    : stage_(stage), sync_(sync), pipe_(pipe), layout_(layout) {
    LOOM_ASSERT(pipe == nullptr || layout != nullptr, "a GPU pipeline without its layout");
}

void DeviceStep::begin_step() {
    // step() leaves the gradients zeroed; only a skipped step does not.
    if (leftover_grads_) stage_.zero_grad();
    leftover_grads_ = false;
    pending_.reset();
    sq_.reset();
    // Training scores the labelled positions only (evaluation may have set
    // another scope): the same loss and gradients, ~7x less masked-LM head.
    stage_.set_logits_scope(LogitsScope::labelled_positions);
}

double DeviceStep::run(const std::vector<MicroBatch>& micro, double loss_scale) {
    leftover_grads_ = true;  // until step() consumes them
    // Pipeline stages: the CPU's micro-batches and schedule on the device.
    if (pipe_) return pipe_->run(micro, loss_scale);
    double loss_sum = 0;
    const size_t n = micro.size();
    for (size_t k = 0; k < n; ++k) {
        const MicroBatch& m = micro[k];
        LossSum l;
        if (m.inputs.B > 0) l = stage_.forward(m.inputs, m.dropout);
        LOOM_ASSERT(l.count == m.label_count,
                    "the model counted {} labels in a micro-batch, the loader {}", l.count,
                    m.label_count);
        loss_sum += l.sum;
        // A replica with no labels in its last micro-batch skips backward but
        // still posts every bucket (end_micro_batch), as the others do.
        if (sync_) sync_->begin_micro_batch(k + 1 == n);
        if (l.count > 0) stage_.backward(loss_scale);
        if (sync_) sync_->end_micro_batch();
    }
    return loss_sum;
}

// The shared rows summed over pp (pipelines), then the dp reduction, which
// a pipeline posts as one micro-batch after its last backward; the norm and
// the update are ordered after it on the device.
void DeviceStep::finalize_grads() {
    if (pipe_) {
        pipe_->reduce_shared_rows();
        if (sync_) {
            sync_->begin_micro_batch(true);
            sync_->end_micro_batch();
        }
    }
    if (sync_) sync_->finalize();
}

double DeviceStep::clip_grad_norm(double max_norm) {
    if (!sq_) {
        // The norm of the reduced gradients, the same on every replica, so
        // the clipping factor (and fp16's skip decision) agrees without
        // another collective. Tensor parallel: sharded rows summed over tp,
        // replicated ones once.
        if (sync_) sync_->wait();
        sq_ = layout_
                  ? layout_->global_norm_sq(stage_.grad_norm_sq_excluding(layout_->norm_excluded()))
                  : stage_.grad_norm_sq();
    }
    return pending_.clip(*sq_, max_norm);
}

void DeviceStep::step(double lr) {
    stage_.step(lr, pending_.factor);
    leftover_grads_ = false;
    pending_.reset();
    sq_.reset();
    if (sync_) sync_->wait();
}

}  // namespace loom
