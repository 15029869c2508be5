// Trainer::gpu_train_step: the training step on the GPU executor, the one
// step that does not run through a StepEngine yet (docs/architecture.md,
// "Not yet").
#include <cmath>

#include "core/check.h"
#include "optim/grad_clip.h"
#include "parallel/gpu_pipeline.h"
#include "parallel/pipeline_parallel.h"
#include "train/trainer.h"

namespace loom {

// The same step on the GPU executor: AdamW (fp16: GradScaler's dynamic loss
// scale, removed inside the update), in one process, data, tensor or pipeline
// parallel over NCCL (gpu_unsupported_reason keeps everything else on the CPU
// path above). Under data parallelism the reduction runs on the device behind
// backward (a pipeline's after its last backward); the host waits for it
// (bounded by the collective timeout) only where it would block on the
// compute stream anyway.
double Trainer::gpu_train_step(int64_t step, TokenBatch* mb, int64_t n, double total,
                               double* grad_norm) {
    const TrainingArgs& t = job_.training;
    const double loss_scale = scaler_ ? scaler_->scale() : 1.0;
    // Training scores the labelled positions only (evaluation may have set
    // another scope): the same loss and gradients, ~7x less masked-LM head.
    gpu_->set_logits_scope(LogitsScope::labelled_positions);
    double loss_sum = 0;
    if (gpu_pipe_) {
        // Pipeline stages: the CPU's micro-batches and schedule on the device,
        // then the shared rows summed over pp and, as the CPU pipeline does,
        // the dp reduction of the whole buffer as one micro-batch.
        std::vector<TokenBatch> pieces;
        const std::vector<MicroBatch> micro = step_micro_batches(step, mb, n, pieces);
        loss_sum = gpu_pipe_->run(micro, loss_scale / total);
        gpu_pipe_->reduce_shared_rows();
        if (gpu_sync_) {
            gpu_sync_->begin_micro_batch(true);
            gpu_sync_->end_micro_batch();
        }
        for (int64_t k = 0; k < n; ++k) count_seen(mb[k]);
    }
    for (int64_t k = 0; k < (gpu_pipe_ ? 0 : n); ++k) {
        const DropoutPlan drop = train_dropout(step, mb[k]);
        LossSum l;
        if (mb[k].B > 0) l = gpu_->forward(mb[k].inputs(), drop);
        LOOM_ASSERT(l.count == mb[k].label_count,
                    "the model counted {} labels in a micro-batch, the loader {}", l.count,
                    mb[k].label_count);
        loss_sum += l.sum;
        // A replica with no labels in its last micro-batch skips backward but
        // still posts every bucket (end_micro_batch), as the others do.
        if (gpu_sync_) gpu_sync_->begin_micro_batch(k == n - 1);
        if (l.count > 0) gpu_->backward(loss_scale / total);
        if (gpu_sync_) gpu_sync_->end_micro_batch();
        count_seen(mb[k]);
    }
    // The norm and AdamW below are ordered after the reduction on the device.
    if (gpu_sync_) gpu_sync_->finalize();
    loss_sum = sync_->sum(loss_sum);  // over replicas, while the last buckets travel
    const double loss = total > 0 ? loss_sum / total : 0.0;
    LOOM_CHECK(std::isfinite(loss),
               "training diverged: the loss is {} at step {}\nHINT: lower learning_rate, raise "
               "warmup_steps, or set max_grad_norm",
               loss, step + 1);
    const double lr = schedule_->lr_at(step - state_.skipped_steps);
    double scale = 1.0 / loss_scale;  // exact: the loss scale is a power of two
    *grad_norm = -1;                  // HF neither computes nor logs it without clipping
    if (t.max_grad_norm > 0 || scaler_) {
        // The norm of the summed gradients, the same on every replica: the
        // clipping factor (and fp16's skip decision) agrees without another
        // collective.
        if (gpu_sync_) gpu_sync_->wait();
        // Tensor parallel: sharded rows summed over tp, replicated ones once.
        const double sq =
            pp_ ? pp_->global_norm_sq(gpu_->grad_norm_sq_excluding(pp_->norm_excluded()))
                : gpu_->grad_norm_sq();
        *grad_norm = std::sqrt(sq) / loss_scale;
        if (t.max_grad_norm > 0 && std::isfinite(*grad_norm))
            scale *= clip_coefficient(*grad_norm, t.max_grad_norm);
    }
    if (scaler_) {
        // GradScaler's rule: an inf/NaN gradient skips the step and halves the scale.
        const bool finite = std::isfinite(*grad_norm);
        scaler_->update(finite);
        state_.loss_scale = scaler_->scale();
        state_.loss_scale_growth_tracker = scaler_->growth_tracker();
        state_.skipped_steps = scaler_->skipped();
        if (!finite) {
            gpu_->zero_grad();
            return loss;
        }
    }
    gpu_->step(lr, scale);
    if (gpu_sync_) gpu_sync_->wait();
    return loss;
}

}  // namespace loom
