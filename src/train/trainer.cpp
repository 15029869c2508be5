// One training step (see trainer.h for its order), the train and eval log
// entries, early stopping and evaluation; the loop around the steps is in
// trainer_loop.cpp.
#include "train/trainer.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/fault_points.h"
#include "io/checkpoint.h"
#include "optim/grad_clip.h"
#include "parallel/dp_step.h"
#include "parallel/layout_plan.h"
#include "parallel/pipeline_parallel.h"
#include "train/log_jsonl.h"
#include "train/log_tensorboard.h"
#include "train/plan_model.h"
#include "train/progress.h"
#include "train/replica_sync_comm.h"
#include "train/report_html.h"

namespace loom {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json entry_json(const LogEntry& e) {
    return json::parse(log_entry_to_json(e));
}

// Rows [part * B / parts, (part + 1) * B / parts) of a batch, with its own
// label count and first global sample (SMP's micro-batches of one batch).
TokenBatch batch_rows(const TokenBatch& b, int64_t part, int64_t parts, Task task) {
    const int64_t r0 = part * b.B / parts, r1 = (part + 1) * b.B / parts, T = b.T;
    TokenBatch o;
    o.B = r1 - r0;
    o.T = T;
    o.epoch = b.epoch;
    o.first_global_sample = b.first_global_sample + r0;
    auto rows = [&](const std::vector<int64_t>& v, int64_t per_row) {
        if (v.empty()) return std::vector<int64_t>{};
        return std::vector<int64_t>(v.begin() + r0 * per_row, v.begin() + r1 * per_row);
    };
    o.input_ids = rows(b.input_ids, T);
    o.attention_mask = rows(b.attention_mask, T);
    o.token_type_ids = rows(b.token_type_ids, T);
    o.position_ids = rows(b.position_ids, T);
    o.feature_index = rows(b.feature_index, 1);
    o.start_positions = rows(b.start_positions, 1);
    o.end_positions = rows(b.end_positions, 1);
    const bool token_labels = task == Task::masked_lm || task == Task::causal_lm;
    o.labels = rows(b.labels, token_labels ? T : 1);
    // The count Model::forward reports (data/collate_pad.cpp's rules).
    o.label_count = 0;
    if (task == Task::question_answering) o.label_count = 2 * o.B;
    if (task == Task::sequence_classification || task == Task::masked_lm)
        for (int64_t v : o.labels) o.label_count += v != -100 ? 1 : 0;
    if (task == Task::causal_lm)
        for (int64_t r = 0; r < o.B; ++r)
            for (int64_t t = 1; t < T; ++t) o.label_count += o.labels[size_t(r * T + t)] != -100;
    return o;
}

}  // namespace

// One optimizer update over the next gradient_accumulation_steps micro-batches.
// Returns the step's mean loss (sum over the global batch / global count).
// Dropout of a training micro-batch: keyed by (seed, step, global sample), so
// every split of the batch over micro-batches, replicas or stages draws alike.
DropoutPlan Trainer::train_dropout(int64_t step, const TokenBatch& b) const {
    DropoutPlan d;
    d.training = true;
    d.seed = uint64_t(job_.training.seed);
    d.step = uint64_t(step);
    d.sample_offset = b.first_global_sample;
    return d;
}

std::vector<MicroBatch> Trainer::step_micro_batches(int64_t step, TokenBatch* mb, int64_t n,
                                                    std::vector<TokenBatch>& pieces) const {
    std::vector<MicroBatch> micro;
    if (!pipeline()) {
        for (int64_t k = 0; k < n; ++k)
            micro.push_back({mb[k].inputs(), train_dropout(step, mb[k]), mb[k].label_count});
        return micro;
    }
    // Pipeline: each batch split into `microbatches` pieces along B (dropout
    // and masks are keyed by global sample, so the split changes nothing).
    const int64_t parts = job_.distribution.microbatches;
    pieces.clear();
    pieces.reserve(size_t(n * parts));
    for (int64_t k = 0; k < n; ++k)
        for (int64_t p = 0; p < parts; ++p)
            pieces.push_back(batch_rows(mb[k], p, parts, job_.task));
    for (const TokenBatch& b : pieces) {
        MicroBatch x;
        x.inputs = b.inputs();
        x.dropout = train_dropout(step, b);
        x.label_count = b.label_count;
        micro.push_back(x);
    }
    return micro;
}

void Trainer::count_seen(const TokenBatch& b) {
    state_.samples_seen += b.B;
    for (int64_t v : b.attention_mask) state_.tokens_seen += v;
}

double Trainer::train_step(int64_t step, TokenBatch* mb, double* grad_norm) {
    const TrainingArgs& t = job_.training;
    const int64_t ga = t.gradient_accumulation_steps;
    const int64_t bpe = loader_->batches_per_epoch();
    // 1. Fetch the step's micro-batches. A step never spans two epochs: the
    //    last group of an epoch may be short (HF updates on it too).
    int64_t n = 0;
    for (int64_t k = 0; k < ga; ++k) {
        if (loader_->position().batches >= bpe) {
            if (k > 0) break;
            TokenBatch end;
            LOOM_ASSERT(!loader_->next(end), "loader: a batch past the end of epoch");
        }
        const bool ok = loader_->next(mb[k]);
        LOOM_ASSERT(ok, "loader: no batch at the start of an epoch");
        ++n;
    }
    // 2. The global count: every labelled token/sample of the step, on every replica.
    int64_t local = 0;
    for (int64_t k = 0; k < n; ++k) local += mb[k].label_count;
    const double total = sync_->sum(double(local));

    // fp16: backward runs on loss x scale so small gradients survive fp16.
    const double loss_scale = scaler_ ? scaler_->scale() : 1.0;
    // 3. Forward/backward of the step's micro-batches, scaled by 1 / total
    //    (a pipeline's batches cut into `microbatches` pieces). A replica
    //    whose share of a short last batch is empty still joins every
    //    collective of the step.
    std::vector<TokenBatch> pieces;
    const std::vector<MicroBatch> micro = step_micro_batches(step, mb, n, pieces);
    StepEngine& engine = engines_->engine();
    engine.begin_step();
    double loss_sum = engine.run(micro, loss_scale / total);
    for (int64_t k = 0; k < n; ++k) count_seen(mb[k]);
    // 4. Gradients reduced (finalize_grads, in the engine's documented
    //    order); the loss over the global batch.
    fault_point("allreduce");
    engine.finalize_grads();
    loss_sum = sync_->sum(loss_sum);  // over replicas (a pipeline summed its stages already)
    const double loss = total > 0 ? loss_sum / total : 0.0;
    LOOM_CHECK(std::isfinite(loss),
               "training diverged: the loss is {} at step {}\nHINT: lower learning_rate, raise "
               "warmup_steps, or set max_grad_norm",
               loss, step + 1);
    // 5. fp16: unscale (exact: the scale is a power of two). The global norm
    //    is inf/NaN exactly when some gradient is, on every rank alike, so
    //    it decides whether the step is skipped (GradScaler's rule).
    if (scaler_) engine.scale_grads(float(1.0 / loss_scale));
    // 6. Clip by the global norm, update. The schedule advances only on
    //    applied updates (HF skips lr_scheduler.step() with the optimizer).
    const double lr = schedule_->lr_at(step - state_.skipped_steps);
    const double max_norm = scaler_ ? 0.0 : t.max_grad_norm;
    if (max_norm <= 0 && !scaler_)
        *grad_norm = -1;  // HF neither computes nor logs it without clipping: a pass saved
    else
        *grad_norm = engine.clip_grad_norm(max_norm);
    if (scaler_) {
        const bool finite = std::isfinite(*grad_norm);
        scaler_->update(finite);
        state_.loss_scale = scaler_->scale();
        state_.loss_scale_growth_tracker = scaler_->growth_tracker();
        state_.skipped_steps = scaler_->skipped();
        if (!finite) return loss;
        // Clip now that the norm is known to be finite (the same norm again).
        if (t.max_grad_norm > 0) engine.clip_grad_norm(t.max_grad_norm);
    }
    engine.step(lr);
    return loss;
}

void Trainer::log_train(int64_t step, double loss, double grad_norm, double lr) {
    const LogEntry e = train_log_entry(step, state_.epoch, loss, grad_norm, lr);
    state_.log_history.push_back(entry_json(e));
    if (jsonl_) jsonl_->log(e);
    if (tb_) tb_->add_entry(e, step);
}

void Trainer::run_evaluation(int64_t step) {
    if (!eval_) return;
    // Pipeline stages: evaluation runs on the whole model, gathered (collective).
    refresh_full_model();
    EvalOutput ev = evaluate(false);
    const LogEntry e = eval_log_entry(step, state_.epoch, ev.metrics);
    state_.log_history.push_back(entry_json(e));
    if (jsonl_) jsonl_->log(e);
    if (tb_) tb_->add_entry(e, step);
    state_.last_eval = json::object();
    for (const auto& [k, v] : ev.metrics) state_.last_eval["eval_" + k] = v;
    state_.last_eval["step"] = step;
    std::string line = fmt::format("eval at step {}:", step);
    for (const auto& [k, v] : ev.metrics)
        if (k != "runtime" && k != "samples_per_second") line += fmt::format(" {} {:.4f}", k, v);
    if (progress_)
        progress_->message(line);
    else if (!opts_.quiet)
        fmt::print(opts_.out, "{}\n", line);
}

// Early stopping after an evaluation (HF EarlyStoppingCallback): an
// improvement larger than the threshold resets the counter.
bool Trainer::early_stop_check() {
    const std::string key = best_metric_key();
    if (key.empty()) return false;  // no metric_for_best_model: no best, no early stopping
    LOOM_CHECK(state_.last_eval.contains(key) && state_.last_eval[key].is_number(),
               "metric_for_best_model: the evaluation reports no '{}' (it has: {})", key,
               state_.last_eval.dump());
    const double v = state_.last_eval[key].get<double>();
    const bool better = improves(v, state_.best_metric) &&
                        (!state_.best_metric || std::abs(v - *state_.best_metric) >
                                                    job_.training.early_stopping_threshold);
    if (better) {
        state_.best_metric = v;
        state_.patience_counter = 0;
        state_.last_eval["is_best"] = true;
    } else {
        ++state_.patience_counter;
    }
    return job_.training.early_stopping_patience > 0 &&
           state_.patience_counter >= job_.training.early_stopping_patience;
}

// What this layout should take per rank (parallel/layout_plan.h: the same
// formulas as `loom plan`).
MemoryPlan Trainer::memory_plan(bool checkpointing) const {
    const DistributionArgs& d = job_.distribution;
    PlanWorkload w;
    w.micro_batch = job_.training.per_device_train_batch_size;
    w.seq = job_.data.max_seq_length;
    w.microbatches = job_.training.gradient_accumulation_steps;
    LayoutChoice l;
    l.dp = int(sync_->dp_size());
    const EngineKind kind = engines_->kind();
    l.zero_stage =
        kind == EngineKind::data_parallel || kind == EngineKind::pipeline ? int(d.zero_stage) : 0;
    if (opts_.tp_comm) l.tp = opts_.tp_comm->size();
    if (const PipelineParallel* pp = pipeline()) {
        // Each batch is split into `microbatches` pipeline micro-batches.
        l.pp = pp->n_stages();
        l.schedule = d.pipeline;
        l.virtual_stages = pp->n_virtual();
        w.micro_batch = std::max<int64_t>(1, w.micro_batch / d.microbatches);
        w.microbatches *= d.microbatches;
    }
    l.checkpointing = checkpointing;
    l.checkpoint_every = int(std::max<int64_t>(job_.distribution.checkpoint_every, 1));
    MemoryPlan m = plan_memory(plan_model_from_config(config_), w, l);
    // This rank's table: the whole model, or its stage's tp slice (one
    // chunk: interleaved stages hold several tables, left as planned).
    const PipelineParallel* pp = pipeline();
    const ParamTable* trained = !pp                    ? (model_ ? &model_->params() : nullptr)
                                : pp->n_virtual() == 1 ? &pp->model().params()
                                                       : nullptr;
    if (job_.peft.enabled && trained) {
        // LoRA: moments (and ZeRO's gradient shards) cover the trainable span only.
        const ParamTable& t = *trained;
        const double span = 4.0 * double(t.flat_numel() - t.trainable_begin());
        const double shards = l.zero_stage == 2 ? 2 : 1;
        m.peak -= m.optimizer;
        if (l.zero_stage == 0) {
            m.optimizer = 2 * span;
        } else {
            m.peak -= shards * m.params / l.dp;
            m.grads -= shards * m.params / l.dp;
            m.grads += shards * span / l.dp;
            m.peak += shards * span / l.dp;
            m.optimizer = 2 * span / l.dp;
        }
        m.peak += m.optimizer;
    }
    return m;
}

EvalOutput Trainer::evaluate(bool keep_outputs) {
    LOOM_CHECK(eval_ != nullptr, "no eval data: set data.eval in the job");
    EvalOptions eo;
    eo.task = job_.task;
    eo.keep_outputs = keep_outputs;
    eo.qa.max_answer_length = job_.data.max_answer_length;
    // Every replica evaluates the whole eval set (the same numbers on every
    // rank, so early stopping and best-model choices agree without messages).
    LoaderOptions lo = loader_options(job_.training.per_device_eval_batch_size, false);
    lo.dp_rank = 0;
    lo.dp_size = 1;
    return evaluate_model(ensure_full_model(), eval_, lo, eo);
}

}  // namespace loom
