// Trainer state on disk: checkpoints (save, rotate, resume), best-model
// tracking, the end of a run (final evaluation, load_best_model_at_end, HF
// export, trainer_state.json, report.html).
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/runtime.h"
#include "io/checkpoint.h"
#include "io/file_utils.h"
#include "io/safetensors.h"
#include "parallel/dp_step.h"
#include "parallel/pipeline_parallel.h"
#include "train/export_hf.h"
#include "train/export_peft.h"
#include "train/job_identity.h"
#include "train/log_jsonl.h"
#include "train/log_tensorboard.h"
#include "train/progress.h"
#include "train/remote_job.h"
#include "train/report_html.h"
#include "train/trainer.h"

namespace loom {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json parse_json_file(const std::string& path) {
    try {
        return json::parse(read_file(path));
    } catch (const json::exception& e) {
        LOOM_FAIL("{}: not valid JSON ({})", path, e.what());
    }
}

// The floating type most of a weights file's elements are stored in.
DType stored_weight_dtype(const std::string& path) {
    const SafetensorsFile f = SafetensorsFile::open(path);
    std::map<DType, int64_t> count;
    for (const auto& name : f.names()) {
        const DType t = f.dtype(name);
        if (t == DType::f32 || t == DType::bf16 || t == DType::f16 || t == DType::f64)
            count[t] += f.shape(name).numel();
    }
    DType best = DType::f32;
    int64_t most = -1;
    for (const auto& [t, n] : count)
        if (n > most) best = t, most = n;
    return best;
}

// Rates over the run's own steps (a resumed run counts only what it trained).
Throughput run_throughput(const TrainResult& r, double runtime_s) {
    Throughput tp;
    tp.train_runtime_s = runtime_s;
    tp.train_samples_per_second = runtime_s > 0 ? double(r.samples) / runtime_s : 0;
    tp.train_steps_per_second = runtime_s > 0 ? double(r.step_losses.size()) / runtime_s : 0;
    tp.train_tokens_per_second = runtime_s > 0 ? double(r.tokens) / runtime_s : 0;
    return tp;
}

// The last log_history entry of a run (HF's train_runtime ... train_loss).
LogEntry summary_entry(const TrainResult& r, const Throughput& tp, double wait_share,
                       double epoch, int64_t gs) {
    double loss_mean = 0;
    for (double l : r.step_losses) loss_mean += l;
    if (!r.step_losses.empty()) loss_mean /= double(r.step_losses.size());
    LogEntry summary;
    summary.set("train_runtime", tp.train_runtime_s);
    summary.set("train_samples_per_second", tp.train_samples_per_second);
    summary.set("train_steps_per_second", tp.train_steps_per_second);
    summary.set("train_tokens_per_second", tp.train_tokens_per_second);
    summary.set("train_loss", loss_mean);
    summary.set("data_wait_share", wait_share);
    summary.set("epoch", epoch);
    summary.set("step", double(gs));
    return summary;
}

}  // namespace

std::string Trainer::best_metric_key() const {
    const std::string& m = job_.training.metric_for_best_model;
    if (m.empty()) return "";
    return m.starts_with("eval_") ? m : "eval_" + m;
}

bool Trainer::improves(double value, std::optional<double> best) const {
    if (!best) return true;
    return job_.training.greater_is_better ? value > *best : value < *best;
}

void Trainer::update_best(const std::string& checkpoint_name) {
    // The model saved now is the best when the evaluation of this very step
    // improved the metric (early_stop_check marked it).
    if (state_.last_eval.value("is_best", false) &&
        state_.last_eval.value("step", int64_t(-1)) == state_.global_step)
        state_.best_model_checkpoint = checkpoint_name;
}

DType Trainer::compute_dtype() const {
    return job_.training.bf16 ? DType::bf16 : job_.training.fp16 ? DType::f16 : DType::f32;
}

Model& Trainer::train_model() {
    // The schedules hold StageModels; the trainer built each stage as a Model.
    return pipeline() ? dynamic_cast<Model&>(pipeline()->model()) : *model_;
}

Model& Trainer::ensure_full_model() {
    if (!model_) {
        model_ = build_model(config_);
        model_->set_compute_dtype(compute_dtype());
    }
    return *model_;
}

void Trainer::refresh_full_model(bool all_ranks) {
    const PipelineParallel* pp = pipeline();
    if (!pp) return;
    // Collective on pp (and dp under ZeRO).
    const std::map<std::string, Tensor> rows = pp->gather_params(all_ranks);
    if (!all_ranks && !sync_->is_main()) return;
    fill_full_model(rows);
}

void Trainer::fill_full_model(const std::map<std::string, Tensor>& rows) {
    ParamTable& full = ensure_full_model().params();
    for (const auto& [name, t] : rows)
        std::memcpy(full.param(full.index(name)), t.raw(), size_t(t.numel()) * sizeof(float));
}

std::string Trainer::save_checkpoint() {
    // Layout-free optimizer state: under ZeRO every replica holds a shard,
    // gathered into global tensors by HF name (a collective, so every rank
    // comes here); rank 0 writes. Pipeline stages gather every row too.
    const PipelineParallel* pp = pipeline();
    const std::map<std::string, Tensor> opt_state = engines_->optimizer_state();
    const int64_t opt_step = engines_->step_count();
    if (!pp) model_->params().download_params();
    const std::map<std::string, Tensor> params =
        pp ? pp->gather_params(false) : model_->params().param_tensors();
    const int64_t step = state_.global_step;
    const std::string name = "checkpoint-" + std::to_string(step);
    if (!sync_->is_main()) {
        update_best(name);
        return "";
    }
    update_best(name);
    CheckpointWriter w(job_.training.output_dir, step);
    w.add_tensors("model.safetensors", params, {{"format", "pt"}});
    w.add_tensors("optimizer.safetensors", opt_state,
                  {{"step", std::to_string(opt_step)},
                   {"optimizer", std::string(enum_name(job_.training.optim))}});
    const LrScheduleArgs& la = schedule_->args();
    const json sched = {{"last_epoch", step},
                        {"type", std::string(lr_scheduler_name(la.type))},
                        {"base_lr", la.base_lr},
                        {"warmup_steps", la.warmup_steps},
                        {"total_steps", la.total_steps},
                        {"last_lr", schedule_->lr_at(step - state_.skipped_steps)}};
    w.add_text("scheduler.json", sched.dump(2) + "\n");
    w.add_text("trainer_state.json", train_state_to_json(state_).dump(2) + "\n");
    w.add_text("job.yaml", job_to_yaml(job_));
    w.add_text(std::string(k_job_identity_file), identity_.dump(2) + "\n");
    // A checkpoint holds the fp32 masters, and its config.json says so.
    ModelConfig saved = config_;
    saved.torch_dtype = DType::f32;
    for (const auto& [file, text] : hf_side_files(saved, job_.model.tokenizer_path))
        w.add_text(file, text);
    const std::string path = w.commit();
    last_saved_step_ = step;
    const std::string best =
        state_.best_model_checkpoint.empty()
            ? ""
            : (fs::path(job_.training.output_dir) / state_.best_model_checkpoint).string();
    rotate_checkpoints(job_.training.output_dir, job_.checkpoint.save_total_limit, best);
    remote_->after_save(path, job_.training.output_dir);
    if (hub_) hub_->after_save(path, step);
    return path;
}

void Trainer::resume(const std::string& dir) {
    LOOM_CHECK(train_rows_ != nullptr, "resume_from_checkpoint needs data.train");
    // Re-hashes every file: a corrupt checkpoint is an error, never a fresh start.
    const int64_t step = verify_checkpoint(dir);
    const std::string state_path = (fs::path(dir) / "trainer_state.json").string();
    TrainState s = train_state_from_json(parse_json_file(state_path), state_path);
    LOOM_CHECK(s.global_step == step,
               "checkpoint {}: trainer_state.json says step {}, the manifest {}", dir,
               s.global_step, step);
    if (s.seed != state_.seed || s.data_seed != state_.data_seed)
        load_notes_.push_back(fmt::format(
            "NOTE: the checkpoint was trained with seed {} / data_seed {}, the job now says {} / "
            "{}: the resumed run will not repeat the original one",
            s.seed, s.data_seed, state_.seed, state_.data_seed));
    if (s.total_steps != plan_.total_steps)
        load_notes_.push_back(fmt::format(
            "NOTE: the checkpoint's run planned {} steps, this job plans {} (the learning-rate "
            "schedule follows this job)",
            s.total_steps, plan_.total_steps));
    s.seed = state_.seed;
    s.data_seed = state_.data_seed;
    s.total_steps = plan_.total_steps;

    const std::string model_path = (fs::path(dir) / "model.safetensors").string();
    // A pipeline stage reads its own rows of the whole model's file.
    const LoadReport rep =
        train_model().params().load(SafetensorsFile::open(model_path), model_path);
    LOOM_CHECK(rep.newly_initialised.empty(),
               "checkpoint {}: model.safetensors lacks {} (and {} more): it was saved from a "
               "different model",
               dir, rep.newly_initialised.empty() ? "" : rep.newly_initialised[0],
               rep.newly_initialised.size() - 1);
    const std::string opt_path = (fs::path(dir) / "optimizer.safetensors").string();
    const SafetensorsFile opt = SafetensorsFile::open(opt_path);
    std::map<std::string, Tensor> tensors;
    for (const auto& n : opt.names()) tensors[n] = opt.get(n);
    auto it = opt.metadata().find("step");
    LOOM_CHECK(it != opt.metadata().end(), "{}: metadata has no 'step'", opt_path);
    engines_->load_optimizer_state(tensors, std::stoll(it->second));
    if (scaler_) {
        // A checkpoint from an fp32/bf16 run starts fp16 at the initial scale.
        if (s.loss_scale > 0)
            scaler_->restore(s.loss_scale, s.loss_scale_growth_tracker, s.skipped_steps);
        s.loss_scale = scaler_->scale();
    }
    state_ = std::move(s);
    last_saved_step_ = state_.global_step;
    resumed_from_ = dir;
}

void Trainer::load_best_model() {
    const std::string dir =
        (fs::path(job_.training.output_dir) / state_.best_model_checkpoint).string();
    verify_checkpoint(dir);
    const std::string path = (fs::path(dir) / "model.safetensors").string();
    ensure_full_model().params().load(SafetensorsFile::open(path), path);
}

void Trainer::export_model(const std::string& dir) {
    // Pipeline stages: the rows gathered at the end, unless the best model
    // was loaded into the whole model since.
    const bool gathered = pipeline() && !gathered_params_.empty();
    // The host copy is current: gather_final_state downloaded it, and
    // load_best_model wrote it.
    ModelConfig out = config_;
    out.torch_dtype = export_dtype_;
    if (job_.peft.enabled) {
        // Tensor or pipeline parallelism: the adapter's rows were gathered
        // whole with the rest; the whole model's table knows which rows
        // PEFT's file holds (the stages' tables mark others' rows frozen).
        if (gathered) fill_full_model(gathered_params_);
        const ParamTable& t = model_->params();
        if (job_.peft.merge_adapters) {
            export_hf_folder(dir, out,
                             merged_tensors(t, config_.lora, config_.family == ModelFamily::gpt2),
                             job_.model.tokenizer_path, parse_shard_size(job_.save.max_shard_size));
            return;
        }
        const std::string base = !job_.model.hub_id.empty() ? job_.model.hub_id : job_.model.path;
        export_peft_adapter(dir, t, config_.lora, job_.task, base);
        return;
    }
    export_hf_folder(dir, out, gathered ? gathered_params_ : model_->params().param_tensors(),
                     job_.model.tokenizer_path, parse_shard_size(job_.save.max_shard_size));
}

void Trainer::choose_export_dtype() {
    if (job_.save.export_dtype) {
        export_dtype_ = *job_.save.export_dtype;
        if (export_dtype_ != DType::f32)
            load_notes_.push_back(fmt::format(
                "export: the final model's weights are written as {} "
                "(hyperparameters.export_dtype); checkpoints keep the float32 master weights",
                dtype_torch_name(export_dtype_)));
        return;
    }
    // As save_pretrained after from_pretrained(torch_dtype="auto"): the type
    // the weights came in; a from-scratch model the type its config names.
    const bool from_file = !job_.model.weights_path.empty();
    const DType src =
        from_file ? stored_weight_dtype(job_.model.weights_path) : config_.torch_dtype;
    export_dtype_ = src == DType::bf16 || src == DType::f16 ? src : DType::f32;
    if (export_dtype_ != DType::f32)
        load_notes_.push_back(fmt::format(
            "export: the final model's weights are written as {}, the type of {} "
            "(hyperparameters.export_dtype: float32 keeps the float32 master weights); training "
            "and checkpoints use float32 masters",
            dtype_torch_name(export_dtype_),
            from_file ? job_.model.weights_path : config_.source + "'s torch_dtype"));
}

void Trainer::finish_run(TrainResult& r, double runtime_s) {
    const TrainingArgs& t = job_.training;
    gather_final_state(r);
    const Metrics final_metrics = final_evaluation();
    r.final_metrics = final_metrics;
    r.best_checkpoint = state_.best_model_checkpoint;

    const Throughput tp = run_throughput(r, runtime_s);
    const double wait_share = runtime_s > 0 ? r.data_wait_s / runtime_s : 0;
    const LogEntry summary = summary_entry(r, tp, wait_share, state_.epoch, state_.global_step);
    if (!sync_->is_main()) return;
    state_.log_history.push_back(json::parse(log_entry_to_json(summary)));
    if (jsonl_) jsonl_->log(summary);

    export_model(t.output_dir);
    write_file_atomic((fs::path(t.output_dir) / "trainer_state.json").string(),
                      train_state_to_json(state_).dump(2) + "\n");
    const std::string report = write_run_report(r, tp, wait_share, final_metrics);
    remote_->upload_final(t.output_dir);

    std::string m;
    for (const auto& [k, v] : final_metrics)
        if (k != "eval_runtime" && k != "eval_samples_per_second")
            m += fmt::format(" {} {:.4f}", k, v);
    if (!m.empty()) say("final:" + m);
    say(
        fmt::format("trained {} steps in {:.1f} s: {:.1f} samples/s, {:.0f} tokens/s, {:.1f}% of "
                    "the time waiting for data",
                    r.step_losses.size(), runtime_s, tp.train_samples_per_second,
                    tp.train_tokens_per_second, 100.0 * wait_share));
    say(fmt::format("model saved to {} ({})", t.output_dir,
                    job_.peft.enabled && !job_.peft.merge_adapters
                        ? "adapter_model.safetensors, adapter_config.json"
                        : "config.json, model.safetensors, tokenizer.json"));
    say(fmt::format("report: {}", report));
    if (hub_) hub_->at_end();
}

// The collectives of the end, before any rank returns: the device's
// parameters, the pipeline stages' rows (on the exporting rank), the
// throughput counts summed over replicas.
void Trainer::gather_final_state(TrainResult& r) {
    if (model_) model_->params().download_params();
    if (const PipelineParallel* pp = pipeline())
        gathered_params_ = pp->gather_params(/*to_all=*/false);
    if (!sync_->is_main()) gathered_params_.clear();  // other replicas' stage 0
    r.samples = int64_t(sync_->sum(double(r.samples)));
    r.skipped_steps = state_.skipped_steps;
    r.tokens = int64_t(sync_->sum(double(r.tokens)));
}

// The final eval_* metrics: a final evaluation unless this step was just
// evaluated, and with load_best_model_at_end the best model's (loaded here).
Trainer::Metrics Trainer::final_evaluation() {
    const int64_t gs = state_.global_step;
    if (eval_ && state_.last_eval.value("step", int64_t(-1)) != gs) run_evaluation(gs);
    Metrics final_metrics;
    for (auto it = state_.last_eval.begin(); it != state_.last_eval.end(); ++it)
        if (it.value().is_number_float())
            final_metrics.emplace_back(it.key(), it.value().get<double>());

    // Only rank 0 exports, and only it may read the checkpoints it wrote.
    if (sync_->is_main() && job_.training.load_best_model_at_end &&
        !state_.best_model_checkpoint.empty()) {
        load_best_model();
        gathered_params_.clear();  // export the best model, now in model_
        say(fmt::format("loaded the best model from {} ({} = {:.4f})", state_.best_model_checkpoint,
                        best_metric_key(), state_.best_metric.value_or(0.0)));
        if (eval_ && state_.best_model_checkpoint != "checkpoint-" + std::to_string(gs)) {
            final_metrics.clear();
            for (const auto& [k, v] : evaluate(false).metrics)
                final_metrics.emplace_back("eval_" + k, v);
        }
    }
    return final_metrics;
}

// report.html in output_dir (the job's hub_token blanked out); returns its path.
std::string Trainer::write_run_report(const TrainResult& r, const Throughput& tp,
                                      double wait_share, const Metrics& final_metrics) {
    const TrainingArgs& t = job_.training;
    const int64_t gs = state_.global_step;
    ReportInput ri;
    ri.summary = {
        {"task", std::string(enum_name(job_.task))},
        {"model", fmt::format("{} ({} parameters)", config_.architecture,
                              train_model().params().num_parameters())},
        {"started from",
         job_.model.weights_path.empty() ? "random initialisation" : job_.model.weights_path},
        {"steps",
         fmt::format("{} of {}{}", gs, plan_.total_steps,
                     r.start_step > 0 ? fmt::format(" (resumed at {})", r.start_step) : "")},
        {"stopped", r.stop == StopReason::early_stopped ? "early stopping" : "completed"},
        {"global batch", fmt::format("{} ({} x {} accumulation x {} replicas)",
                                     plan_.global_batch_size, t.per_device_train_batch_size,
                                     t.gradient_accumulation_steps, sync_->dp_size())},
        {"device", !stack_.be             ? fmt::format("CPU, {} threads", runtime_threads())
                   : sync_->dp_size() > 1 ? fmt::format("{} devices ({} on rank 0)",
                                                        sync_->dp_size(), stack_.be->name())
                                          : stack_.be->name()},
        {"waiting for data", fmt::format("{:.1f}% of training time", 100.0 * wait_share)},
        {"best checkpoint",
         state_.best_model_checkpoint.empty() ? "-" : state_.best_model_checkpoint},
        {"output", t.output_dir}};
    ri.throughput = tp;
    if (jsonl_) ri.history = read_metrics_jsonl(jsonl_->path());
    ri.final_metrics = final_metrics;
    ri.job_yaml = opts_.job_text.empty() ? job_to_yaml(job_) : opts_.job_text;
    // A report is shared; the job's hub_token must not be in it.
    if (const std::string& tok = job_.hub.hub_token; !tok.empty())
        for (size_t p; (p = ri.job_yaml.find(tok)) != std::string::npos;)
            ri.job_yaml.replace(p, tok.size(), "<hub_token>");
    const std::string report = (fs::path(t.output_dir) / "report.html").string();
    write_report_html(report, ri);
    return report;
}

}  // namespace loom
