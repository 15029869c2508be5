// Trainer::train(): the run around the optimizer steps (trainer.cpp holds
// one step). Announces the run, checks that the replicas agree, then steps
// until the plan, early stopping or an agreed stop signal ends it; logging,
// the progress bar, evaluation and checkpoints happen between steps, in that
// order. It does not write the final model: finish_run
// (trainer_checkpoint.cpp) does, for a run that was not interrupted.
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "core/runtime.h"
#include "core/stop_signals.h"
#include "io/checkpoint.h"
#include "parallel/layout_plan.h"
#include "train/log_jsonl.h"
#include "train/log_tensorboard.h"
#include "train/progress.h"
#include "train/replica_sync_comm.h"
#include "train/trainer.h"

namespace loom {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double mib(double bytes) {
    return bytes / double(1 << 20);
}

// The process's peak resident set (VmHWM), in bytes; 0 where /proc lacks it.
double peak_resident_bytes() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) * 1024.0;
    return 0;
}

}  // namespace

void Trainer::say(const std::string& s) const {
    if (sync_->is_main() && !opts_.quiet) {
        fmt::print(opts_.out, "{}\n", s);
        std::fflush(opts_.out);
    }
}

// metrics.jsonl and the TensorBoard events continue a resumed run's files.
void Trainer::open_run_outputs(bool resumed) {
    if (!sync_->is_main()) return;
    const TrainingArgs& t = job_.training;
    jsonl_ = std::make_unique<JsonlLogger>(t.output_dir, resumed ? state_.global_step : -1);
    tb_ = std::make_unique<TensorBoardWriter>(
        t.logging_dir.empty() ? (fs::path(t.output_dir) / "runs").string() : t.logging_dir,
        resumed ? state_.global_step + 1 : -1);
    if (job_.hub.push_to_hub) hub_ = std::make_unique<HubPusher>(job_);
}

// The set-up notes, the model, the step plan and the memory plan; then the
// progress bar. Returns the memory plan (the first step is measured against it).
MemoryPlan Trainer::announce_run(bool resumed) {
    const TrainingArgs& t = job_.training;
    for (const auto& n : load_notes_) say(n);
    say(fmt::format("model: {} ({}), {} parameters; task {}", config_.architecture,
                    job_.model.weights_path.empty() ? "from scratch" : job_.model.weights_path,
                    train_model().params().num_parameters(), enum_name(job_.task)));
    if (job_.peft.enabled) {
        int64_t n = 0;
        for (const ParamRow& r : train_model().params().rows())  // whole adapters, not tp slices
            if (r.trainable) n += r.shard.sharded() ? r.shard.global.numel() : r.numel();
        say(
            fmt::format("LoRA: r {}, lora_alpha {} (scaling {}); {} trainable parameters, the "
                        "rest frozen",
                        config_.lora.r, config_.lora.lora_alpha, config_.lora.scaling(), n));
    }
    say(fmt::format(
        "plan: {} examples, {} steps ({} per epoch, {} epochs), global batch {} = {} "
        "x {} accumulation x {} replicas, warmup {}, {} threads",
        train_rows_->size(), plan_.total_steps, plan_.updates_per_epoch, plan_.epochs,
        plan_.global_batch_size, t.per_device_train_batch_size, t.gradient_accumulation_steps,
        sync_->dp_size(), plan_.warmup_steps, runtime_threads()));
    if (resumed)
        say(fmt::format("resumed at step {} (epoch {:.2f}){}", state_.global_step, state_.epoch,
                        state_.global_step >= plan_.total_steps
                            ? ": the run had already finished, nothing is left to train (raise "
                              "max_steps or num_train_epochs to train further)"
                            : ""));
    const bool ckpt = job_.distribution.activation_checkpointing;
    const MemoryPlan mem = memory_plan(ckpt);
    say(fmt::format(
        "memory plan per rank: parameters {:.1f} MiB, gradients {:.1f} MiB, optimizer "
        "{:.1f} MiB, activations {:.1f} MiB per micro-batch{} ({:.1f} MiB {} it), backward "
        "workspace {:.1f} MiB; predicted peak {:.1f} MiB",
        mib(mem.params), mib(mem.grads), mib(mem.optimizer), mib(mem.activations_per_micro),
        ckpt ? " with activation checkpointing" : "", mib(memory_plan(!ckpt).activations_per_micro),
        ckpt ? "without" : "with", mib(mem.workspace), mib(mem.peak)));
    if (sync_->is_main() && !opts_.quiet)
        progress_ = std::make_unique<ProgressBar>(
            plan_.total_steps, state_.global_step, stderr,
            t.disable_tqdm ? std::optional<bool>(false) : std::nullopt);
    return mem;
}

// Before step 0 the replicas prove they run the same job on the same data.
void Trainer::check_replicas_agree() {
    if (sync_->dp_size() <= 1) return;
    sync_->check_same(fingerprint64(job_to_yaml(job_)), "job (the resolved job file)");
    std::string plan =
        fmt::format("{} {} {} {} {}", train_rows_->size(), train_rows_->total_tokens(),
                    plan_.total_steps, plan_.global_batch_size, state_.global_step);
    sync_->check_same(fingerprint64(plan), "data plan (examples, tokens, steps, batch, start)");
}

// A stop asked for on any rank stops every rank after the same step; they
// agree on the largest signal number any of them received (a collective).
int Trainer::agreed_stop(int64_t gs) {
    int local = 0;
    if (opts_.interrupt_at_step >= 0 && opts_.interrupt_at_step == gs)
        local = SIGTERM;
    else
        local = opts_.handle_signals ? stop_requested() : 0;
    return int(sync_->max_over_job(local));
}

TrainResult Trainer::train() {
    LOOM_CHECK(train_rows_ != nullptr, "data.train is not set in the job: nothing to train on");
    TrainResult r;
    r.start_step = state_.global_step;
    const bool resumed = !resumed_from_.empty();
    open_run_outputs(resumed);
    const MemoryPlan mem = announce_run(resumed);
    check_replicas_agree();
    int stop_signal = agreed_stop(-1);
    // The training step only needs the masked positions' logits.
    train_model().set_logits_scope(LogitsScope::labelled_positions);
    loader_->seek({state_.loader_epoch, state_.loader_batches});
    const double wait0 = loader_->wait_seconds();
    const auto t0 = Clock::now();
    bool stop_early = false;
    if (stop_signal == 0) stop_signal = run_steps(r, mem, t0, stop_early);
    const bool interrupted = stop_signal != 0;

    const double runtime = seconds_since(t0);
    r.train_runtime_s = runtime;
    r.data_wait_s = loader_->wait_seconds() - wait0;
    if (progress_) progress_->finish();
    r.global_step = state_.global_step;
    r.stop = interrupted ? StopReason::interrupted
                         : (stop_early ? StopReason::early_stopped : StopReason::completed);
    if (interrupted) {
        report_interrupted(r, stop_signal);
        return r;
    }
    finish_run(r, runtime);
    return r;
}

// Steps until the plan's end, early stopping or a stop signal; returns the
// agreed signal (0 when none stopped the run).
int Trainer::run_steps(TrainResult& r, const MemoryPlan& mem,
                       std::chrono::steady_clock::time_point t0, bool& stop_early) {
    const CheckpointArgs& c = job_.checkpoint;
    std::vector<TokenBatch> mb(size_t(job_.training.gradient_accumulation_steps));
    StepWindow window;
    window.run_start = t0;
    int stop_signal = 0;
    while (stop_signal == 0 && state_.global_step < plan_.total_steps) {
        const int64_t step = state_.global_step;
        const int64_t samples0 = state_.samples_seen, tokens0 = state_.tokens_seen;
        double grad_norm = 0;
        const double loss = train_step(step, mb.data(), &grad_norm);
        if (step == r.start_step) report_first_step(mem);
        state_.global_step = step + 1;
        r.step_losses.push_back(loss);
        r.samples += state_.samples_seen - samples0;
        r.tokens += state_.tokens_seen - tokens0;
        window.samples += state_.samples_seen - samples0;
        window.tokens += state_.tokens_seen - tokens0;
        ++window.steps;
        const bool epoch_end = advance_data_position();

        const int64_t gs = state_.global_step;
        const bool last = gs >= plan_.total_steps;
        log_step(gs, loss, grad_norm, epoch_end, window);
        // Evaluate before saving, so the checkpoint knows whether it is the best;
        // the last step is always evaluated (final metrics).
        if (eval_due(gs, epoch_end, last)) {
            run_evaluation(gs);
            stop_early = early_stop_check();
            train_model().set_logits_scope(LogitsScope::labelled_positions);
        }
        // After the last step the run simply finishes (export included).
        stop_signal = last ? 0 : agreed_stop(gs);
        const bool do_save =
            (c.save_strategy == IntervalStrategy::steps && gs % plan_.save_steps == 0) ||
            (c.save_strategy == IntervalStrategy::epoch && epoch_end) ||
            // HF saves at the end of training; an interrupted or stopped run
            // must leave a checkpoint to resume from.
            ((last || stop_early) && c.save_strategy != IntervalStrategy::no) ||
            stop_signal != 0;
        if (do_save) r.last_checkpoint = save_checkpoint();
        // A signal that came while the checkpoint was written stops now, not
        // one step (and one more checkpoint) later. Also a barrier: rank 0
        // writes alone, and no rank may exit before its checkpoint is whole.
        if (do_save && !last && !stop_early) {
            const int during_save = agreed_stop(-1);
            if (stop_signal == 0 && during_save != 0) stop_signal = during_save;
        }
        if (stop_signal != 0 || stop_early) break;
    }
    return stop_signal;
}

// What the first step measured against the memory plan.
void Trainer::report_first_step(const MemoryPlan& mem) {
    // The arena holds what the longest batch so far needed; the plan
    // assumes max_seq_length, so dynamic padding comes in under it.
    // The peak is the largest over all ranks (a collective).
    const double peak = sync_->max_over_job(peak_resident_bytes());
    std::string m = fmt::format(
        "after the first step: activations {:.1f} MiB measured (longest batch so far; "
        "planned {:.1f} MiB at max_seq_length), process peak resident {:.1f} MiB "
        "(predicted {:.1f} MiB + the runtime){}",
        mib(double(train_model().activation_bytes())),
        mib(mem.activations_per_micro + mem.workspace), mib(peak), mib(mem.peak),
        sync_->dp_size() > 1 || pipeline() ? ", the largest of all ranks" : "");
    // Whether the reduction overlapped backward (rank 0's view).
    const auto buckets = [&m](int64_t by_hook, int64_t at_end, double wait_s) {
        m += fmt::format(
            "; gradient buckets: {} started while backward ran, {} after it, {:.1f} ms "
            "waited for",
            by_hook, at_end, 1e3 * wait_s);
    };
    if (const DataParallel* dp = engines_->data_parallel())
        buckets(dp->stats().launched_by_hook, dp->stats().launched_at_end, dp->stats().wait_s);
    if (progress_)
        progress_->message(m);
    else
        say(m);
}

// The data position after a step, normalised so an epoch's end reads as the
// next epoch's start. Returns whether the step ended an epoch.
bool Trainer::advance_data_position() {
    const int64_t bpe = loader_->batches_per_epoch();
    LoaderPosition pos = loader_->position();
    const bool epoch_end = pos.batches >= bpe;
    if (epoch_end) pos = {pos.epoch + 1, 0};
    state_.loader_epoch = pos.epoch;
    state_.loader_batches = pos.batches;
    state_.epoch = double(pos.epoch) + double(pos.batches) / double(bpe);
    return epoch_end;
}

// The train log entry when logging_strategy says so, and the progress bar.
void Trainer::log_step(int64_t gs, double loss, double grad_norm, bool epoch_end,
                       StepWindow& window) {
    const TrainingArgs& t = job_.training;
    // HF logs the rate after the scheduler step, which skipped fp16 steps do not take.
    const double lr_logged = schedule_->lr_at(gs - state_.skipped_steps);
    log_loss_sum_ += loss;
    ++log_steps_;
    const bool do_log =
        (t.logging_strategy == IntervalStrategy::steps &&
         (gs % plan_.logging_steps == 0 || (t.logging_first_step && gs == 1))) ||
        (t.logging_strategy == IntervalStrategy::epoch && epoch_end);
    if (do_log && sync_->is_main()) {
        log_train(gs, log_loss_sum_ / double(log_steps_), grad_norm, lr_logged);
        log_loss_sum_ = 0;
        log_steps_ = 0;
    }
    if (!progress_) return;
    const double now = seconds_since(window.run_start);
    const double dt = std::max(now - window.since, 1e-9);
    ProgressStats ps;
    ps.loss = loss;
    ps.learning_rate = lr_logged;
    ps.samples_per_second = double(window.samples) / dt;
    ps.tokens_per_second = double(window.tokens) / dt;
    progress_->update(gs, ps);
    if (window.steps >= 20) {
        window.since = now;
        window.samples = window.tokens = window.steps = 0;
    }
}

bool Trainer::eval_due(int64_t gs, bool epoch_end, bool last) const {
    const TrainingArgs& t = job_.training;
    return eval_ && ((t.eval_strategy == IntervalStrategy::steps && gs % plan_.eval_steps == 0) ||
                     (t.eval_strategy == IntervalStrategy::epoch && epoch_end) || last);
}

void Trainer::report_interrupted(TrainResult& r, int stop_signal) {
    r.best_checkpoint = state_.best_model_checkpoint;
    r.stop_signal = stop_signal;
    if (r.last_checkpoint.empty() && r.global_step == r.start_step)
        say(fmt::format("stopped by {} before the first step: nothing new to save",
                        strsignal(stop_signal)));
    else
        say(fmt::format("stopped by {} after step {}; checkpoint {}", strsignal(stop_signal),
                        state_.global_step, r.last_checkpoint));
    say(fmt::format("run `loom train {}` again to continue from the newest checkpoint",
                    job_.source));
}

}  // namespace loom
