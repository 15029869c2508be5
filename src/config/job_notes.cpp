// Notes for the start of the log (Job::notes): the run's precision, what
// report_to means here, and every key that was accepted but changes nothing
// in this job, with the reason.
//
// The rule they serve: an accepted key either changes what the run does or
// the log says why it does not. Keys are noted when the user wrote them
// (HF-style "has no effect" cases: logging_steps under logging_strategy
// epoch, num_train_epochs beside max_steps, ...), and distribution settings
// when their value differs from the default, since SMP parameters reach them
// under other names. Launch facts (ranks per host, replicas) are checked
// later, against the running job (launch_check.h).
#include <filesystem>

#include "config/job_sections.h"

namespace loom::config {

namespace {

namespace fs = std::filesystem;

std::string hp(std::string_view key) {
    return join_path("hyperparameters", key);
}

// The value as written, for "key: value has no effect" lines.
std::string written(const YamlCtx& ctx, const std::string& path) {
    const YAML::Node& n = ctx.seen.at(path);
    return n.IsScalar() ? n.Scalar() : describe(n);
}

struct Notes {
    const YamlCtx& ctx;
    void add(std::string line) const { ctx.notes.push_back(std::move(line)); }
    // "<path>: <value as written> has no effect: <why>", when <path> was written.
    void unused(const std::string& path, const std::string& why) const {
        if (ctx.given(path))
            add(fmt::format("{}: {} has no effect: {}", path, written(ctx, path), why));
    }
};

std::string precision_note(const YamlCtx& ctx, const TrainingArgs& t) {
    const std::string smp = "distribution.smdistributed.modelparallel.parameters.";
    auto source = [&](std::string_view flag) {
        return ctx.given(hp(flag)) ? hp(flag) : smp + std::string(flag);
    };
    if (t.bf16)
        return fmt::format(
            "precision: bf16 mixed precision ({}): bf16 GEMM operands with fp32 "
            "accumulation; fp32 master weights and optimizer state",
            source("bf16"));
    if (t.fp16)
        return fmt::format(
            "precision: fp16 mixed precision ({}) with dynamic loss scaling (from 65536, halved "
            "and the step skipped on an inf/NaN gradient, doubled after 2000 clean steps); fp32 "
            "master weights and optimizer state (on the CPU, GEMM operands and results are "
            "rounded to fp16: a GPU's overflow behaviour, no speed gain)",
            source("fp16"));
    return "precision: fp32 (hyperparameters.bf16 and fp16 are off)";
}

void report_to_notes(const Notes& n, const YamlCtx& ctx, const TrainingArgs& t) {
    const std::string key = hp("report_to");
    if (!ctx.given(key)) return;
    const YAML::Node& node = ctx.seen.at(key);
    std::vector<std::string> names;
    if (node.IsSequence())
        for (const auto& v : node) names.push_back(v.Scalar());
    else
        names.push_back(node.Scalar());
    if (names.empty()) names.push_back("none");
    for (const auto& name : names) {
        if (name == "tensorboard")
            n.add(
                fmt::format("{}: tensorboard: events are written to {} (Loom always writes "
                            "them, and metrics.jsonl in output_dir)",
                            key, t.logging_dir));
        else if (name == "all")
            n.add(
                fmt::format("{}: all: Loom's one integration is TensorBoard; its events are "
                            "written to {} (always, with metrics.jsonl in output_dir)",
                            key, t.logging_dir));
        else if (name == "none")
            n.add(
                fmt::format("{}: none: nothing is sent to any service; the TensorBoard events "
                            "in {} and metrics.jsonl are local files Loom always writes",
                            key, t.logging_dir));
        else
            n.add(
                fmt::format("{}: {} is not available in Loom, so nothing is sent to it; the "
                            "metrics go to metrics.jsonl and TensorBoard events in {}",
                            key, name, t.logging_dir));
    }
}

void training_notes(const Notes& n, const Job& job) {
    const TrainingArgs& t = job.training;
    const CheckpointArgs& c = job.checkpoint;
    if (t.max_steps > 0)
        n.unused(hp("num_train_epochs"),
                 fmt::format("max_steps ({}) sets the length of training, as in Hugging Face",
                             t.max_steps));
    if (t.warmup_steps > 0 && t.warmup_ratio > 0)
        n.unused(
            hp("warmup_ratio"),
            fmt::format("warmup_steps ({}) is used instead, as in Hugging Face", t.warmup_steps));
    if (t.lr_scheduler_type == LrSchedulerType::constant)
        for (std::string_view k : {"warmup_steps", "warmup_ratio"})
            n.unused(hp(k),
                     "lr_scheduler_type 'constant' never warms up (constant_with_warmup "
                     "does)");
    const std::string_view sched = lr_scheduler_name(t.lr_scheduler_type);
    if (t.lr_scheduler_type != LrSchedulerType::polynomial)
        for (std::string_view k : {"lr_end", "power"})
            n.unused(hp(fmt::format("lr_scheduler_kwargs.{}", k)),
                     fmt::format("only the polynomial schedule reads it (lr_scheduler_type is "
                                 "'{}')",
                                 sched));
    if (t.lr_scheduler_type != LrSchedulerType::cosine &&
        t.lr_scheduler_type != LrSchedulerType::cosine_with_restarts)
        n.unused(
            hp("lr_scheduler_kwargs.num_cycles"),
            fmt::format("only the cosine schedules read it (lr_scheduler_type is '{}')", sched));
    auto strategy_note = [&](std::string_view steps_key, std::string_view strategy_key,
                             IntervalStrategy s) {
        if (s != IntervalStrategy::steps)
            n.unused(hp(steps_key), fmt::format("{} is '{}'", strategy_key, enum_name(s)));
    };
    strategy_note("logging_steps", "logging_strategy", t.logging_strategy);
    strategy_note("eval_steps", "eval_strategy", t.eval_strategy);
    strategy_note("save_steps", "save_strategy", c.save_strategy);
    if (t.early_stopping_patience == 0)
        n.unused(hp("early_stopping_threshold"),
                 "early_stopping_patience is 0 (no early stopping)");
    if (t.metric_for_best_model.empty())
        n.unused(hp("greater_is_better"),
                 "no metric_for_best_model is compared (set it, load_best_model_at_end or "
                 "early_stopping_patience)");
    if (job.data.eval.empty()) n.unused(hp("per_device_eval_batch_size"), "there is no data.eval");
}

// False for a path whose extension says JSONL, JSON, CSV or TSV; true for
// plain text and for folders (whose files are not known here).
bool may_hold_text(std::string path) {
    for (std::string_view z : {".gz", ".zst"})
        if (path.ends_with(z)) path.resize(path.size() - z.size());
    const std::string ext = fs::path(path).extension().string();
    return !(ext == ".jsonl" || ext == ".ndjson" || ext == ".json" || ext == ".csv" ||
             ext == ".tsv");
}

void data_notes(const Notes& n, const Job& job) {
    const std::string task(enum_name(job.task));
    auto only_for = [&](std::string_view key, Task wanted) {
        if (job.task != wanted)
            n.unused(join_path("data", key),
                     fmt::format("only {} reads it (task is {})", enum_name(wanted), task));
    };
    only_for("mlm_probability", Task::masked_lm);
    for (std::string_view k : {"doc_stride", "max_answer_length", "question_column",
                               "context_column", "answers_column", "id_column"})
        only_for(k, Task::question_answering);
    for (std::string_view k : {"label_column", "text_pair_column"})
        only_for(k, Task::sequence_classification);
    only_for("prompt_column", Task::causal_lm);
    if (job.data.prompt_column.empty())
        n.unused("data.completion_column", "it is read with data.prompt_column, which is not set");
    else
        n.unused("data.text_column", "instruction data reads prompt_column and completion_column");
    if (job.task == Task::question_answering)
        n.unused("data.text_column",
                 "question-answering reads question_column and "
                 "context_column");
    const DataArgs& d = job.data;
    const bool any = !d.train.empty() || !d.eval.empty();
    const bool text =
        (!d.train.empty() && may_hold_text(d.train)) || (!d.eval.empty() && may_hold_text(d.eval));
    if (any && !text)
        n.unused("data.sample_by",
                 "it splits plain-text files (.txt, .text), and the data is "
                 "JSONL, JSON or CSV/TSV");
}

void distribution_notes(const Notes& n, const YamlCtx& ctx, const DistributionArgs& d) {
    const std::string smp = "distribution.smdistributed.modelparallel.parameters.";
    // The path the user wrote: Loom's key, or SMP's parameter of that name.
    auto key = [&](std::string_view k) {
        const std::string s = smp + std::string(k);
        return ctx.given(s) && !ctx.given(join_path("distribution", k))
                   ? s
                   : join_path("distribution", k);
    };
    auto note = [&](std::string_view k, const std::string& value, const std::string& why) {
        n.add(fmt::format("{}: {} has no effect: {}", key(k), value, why));
    };
    if (d.pipeline_parallel_degree == 1 && d.tensor_parallel_degree == 1) {
        const std::string why =
            "there is no pipeline or tensor parallelism (pipeline_parallel_degree and "
            "tensor_parallel_degree are 1)";
        if (d.microbatches > 1)
            note("microbatches", std::to_string(d.microbatches),
                 why + "; hyperparameters.gradient_accumulation_steps splits a batch on one rank");
        if (d.pipeline != ScheduleKind::one_f_one_b)
            note("pipeline", std::string(enum_name(d.pipeline)), why);
        if (!d.partition.empty())
            note("partition", fmt::format("[{}]", d.partition[0]), why);  // one stage
    }
    if (!d.activation_checkpointing && d.checkpoint_every != 1)
        note("checkpoint_every", std::to_string(d.checkpoint_every),
             "activation_checkpointing is off");
    if (!d.offload_activations && d.activation_loading_horizon != 4)
        note("activation_loading_horizon", std::to_string(d.activation_loading_horizon),
             "offload_activations is off");
}

}  // namespace

void add_job_notes(const YamlCtx& ctx, const Job& job) {
    const Notes n{ctx};
    // First: the one note every run has.
    ctx.notes.insert(ctx.notes.begin(), precision_note(ctx, job.training));
    report_to_notes(n, ctx, job.training);
    training_notes(n, job);
    data_notes(n, job);
    distribution_notes(n, ctx, job.distribution);
    for (auto& line : hub_notes(ctx, job)) ctx.notes.push_back(std::move(line));
}

}  // namespace loom::config
