// Cross-key defaults and checks for a parsed job, following HF
// TrainingArguments.__post_init__ where HF has a rule (eval_steps defaults
// to logging_steps, load_best_model_at_end needs matching save and eval
// strategies, ...). Each error points at the key the user should change.
//
// One deliberate difference: greater_is_better defaults to false for a
// metric named like "perplexity" as well as "*loss" (HF only looks for
// "loss", which would keep the worst perplexity as the best model).
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "config/job_sections.h"

namespace loom::config {

namespace fs = std::filesystem;

namespace {

const char* const k_hp = "hyperparameters";

std::string hp(std::string_view key) {
    return join_path(k_hp, key);
}

// Written in the job (or --set) with a non-null value.
bool given(const YamlCtx& ctx, const std::string& path) {
    auto it = ctx.seen.find(path);
    return it != ctx.seen.end() && !it->second.IsNull();
}

std::vector<std::string_view> metrics_for(Task task) {
    switch (task) {
        case Task::sequence_classification:
            return {"loss", "accuracy", "f1", "precision", "recall"};
        case Task::question_answering:
            return {"loss", "exact_match", "f1"};
        case Task::masked_lm:
        case Task::causal_lm:
            return {"loss", "perplexity", "accuracy"};
        case Task::base:
            break;  // never a job's task (the parser's names exclude it)
    }
    return {"loss"};
}

void check_steps(const YamlCtx& ctx, std::string_view key, double value) {
    if (!(value > 0))
        ctx.fail_key(hp(key), fmt::format("{}: must be > 0 when its strategy is 'steps' (a "
                                          "value below 1 is a fraction of the total steps)",
                                          hp(key)));
    if (value > 1 && value != static_cast<double>(static_cast<int64_t>(value)))
        ctx.fail_key(hp(key), fmt::format("{}: {} must be an integer when > 1", hp(key), value));
}

void validate_training(const YamlCtx& ctx, Job& job) {
    TrainingArgs& t = job.training;
    CheckpointArgs& c = job.checkpoint;
    auto bad = [&](std::string_view key, const std::string& msg) {
        ctx.fail_key(hp(key), fmt::format("{}: {}", hp(key), msg));
    };
    if (given(ctx, hp("eval_strategy")) && given(ctx, hp("evaluation_strategy")) &&
        ctx.seen.at(hp("eval_strategy")).Scalar() !=
            ctx.seen.at(hp("evaluation_strategy")).Scalar())
        bad("evaluation_strategy",
            "disagrees with eval_strategy (evaluation_strategy is its "
            "older name; keep one)");
    if (t.per_device_train_batch_size < 1) bad("per_device_train_batch_size", "must be >= 1");
    if (t.per_device_eval_batch_size < 1) bad("per_device_eval_batch_size", "must be >= 1");
    if (t.gradient_accumulation_steps < 1) bad("gradient_accumulation_steps", "must be >= 1");
    if (t.max_steps <= 0 && !(t.num_train_epochs > 0))
        bad("num_train_epochs", "must be > 0 (or set max_steps)");
    if (t.learning_rate < 0) bad("learning_rate", "must be >= 0");
    if (t.weight_decay < 0) bad("weight_decay", "must be >= 0");
    if (t.adam_beta1 < 0 || t.adam_beta1 >= 1) bad("adam_beta1", "must be in [0, 1)");
    if (t.adam_beta2 < 0 || t.adam_beta2 >= 1) bad("adam_beta2", "must be in [0, 1)");
    if (t.adam_epsilon < 0) bad("adam_epsilon", "must be >= 0");
    if (t.max_grad_norm < 0) bad("max_grad_norm", "must be >= 0 (0 turns clipping off)");
    if (t.warmup_ratio < 0 || t.warmup_ratio > 1) bad("warmup_ratio", "must be in [0, 1]");
    if (t.warmup_steps < 0) bad("warmup_steps", "must be >= 0");
    if (t.lr_scheduler_type == LrSchedulerType::polynomial && !(t.learning_rate > t.lr_end))
        bad("learning_rate",
            fmt::format("the polynomial schedule decays to lr_end = {}, so learning_rate must "
                        "be larger",
                        t.lr_end));
    if (t.power <= 0)
        ctx.fail_key(hp("lr_scheduler_kwargs.power"),
                     "hyperparameters.lr_scheduler_kwargs.power: must be > 0");
    if (t.num_cycles && *t.num_cycles <= 0)
        ctx.fail_key(hp("lr_scheduler_kwargs.num_cycles"),
                     "hyperparameters.lr_scheduler_kwargs.num_cycles: must be > 0");
    if (t.bf16 && t.fp16) bad("fp16", "bf16 and fp16 cannot both be on");
    if (c.save_total_limit < 0) bad("save_total_limit", "must be >= 0 (0 or null keeps all)");
    if (t.early_stopping_patience < 0) bad("early_stopping_patience", "must be >= 0");

    // HF: eval_steps falls back to logging_steps.
    if (t.eval_strategy == IntervalStrategy::steps && !given(ctx, hp("eval_steps")))
        t.eval_steps = t.logging_steps;
    if (t.logging_strategy == IntervalStrategy::steps)
        check_steps(ctx, "logging_steps", t.logging_steps);
    if (t.eval_strategy == IntervalStrategy::steps) check_steps(ctx, "eval_steps", t.eval_steps);
    if (c.save_strategy == IntervalStrategy::steps) check_steps(ctx, "save_steps", c.save_steps);

    if (t.eval_strategy != IntervalStrategy::no && job.data.eval.empty()) {
        std::string key =
            given(ctx, hp("evaluation_strategy")) ? "evaluation_strategy" : "eval_strategy";
        bad(key, fmt::format("'{}' needs an eval set: add data.eval", enum_name(t.eval_strategy)));
    }
    if (t.early_stopping_patience > 0 && t.eval_strategy == IntervalStrategy::no)
        bad("early_stopping_patience", "needs evaluation: set eval_strategy to steps or epoch");

    if (t.load_best_model_at_end) {
        if (t.eval_strategy == IntervalStrategy::no)
            bad("load_best_model_at_end", "needs evaluation: set eval_strategy to steps or epoch");
        if (t.eval_strategy != c.save_strategy)
            bad("load_best_model_at_end",
                fmt::format("requires the save and eval strategy to match, but save_strategy is "
                            "'{}' and eval_strategy is '{}'",
                            enum_name(c.save_strategy), enum_name(t.eval_strategy)));
        if (t.eval_strategy == IntervalStrategy::steps) {
            // HF compares ratios scaled by 1e6 when both are fractions.
            bool frac_e = t.eval_steps < 1, frac_s = c.save_steps < 1;
            bool ok;
            if (frac_e != frac_s) {
                ok = false;
            } else {
                auto scale = frac_e ? 1e6 : 1.0;
                auto s = static_cast<int64_t>(std::llround(c.save_steps * scale));
                auto e = static_cast<int64_t>(std::llround(t.eval_steps * scale));
                ok = e > 0 && s % e == 0;
            }
            if (!ok)
                bad("save_steps", fmt::format("load_best_model_at_end requires save_steps ({}) "
                                              "to be a round multiple of eval_steps ({})",
                                              c.save_steps, t.eval_steps));
        }
    }
    bool needs_metric = t.load_best_model_at_end || t.early_stopping_patience > 0;
    if (t.metric_for_best_model.empty() && needs_metric) t.metric_for_best_model = "loss";
    if (!t.metric_for_best_model.empty()) {
        std::string name = t.metric_for_best_model;
        if (name.starts_with("eval_")) name = name.substr(5);
        auto known = metrics_for(job.task);
        if (std::find(known.begin(), known.end(), name) == known.end()) {
            std::string list;
            for (auto k : known) list += (list.empty() ? "" : ", ") + std::string(k);
            bad("metric_for_best_model",
                fmt::format("'{}' is not computed for {} (available: {}; did you mean '{}'?)",
                            t.metric_for_best_model, enum_name(job.task), list,
                            nearest_key(name, known)));
        }
        if (!given(ctx, hp("greater_is_better")))
            t.greater_is_better = !(name.ends_with("loss") || name == "perplexity");
    }
    if (!given(ctx, hp("data_seed"))) t.data_seed = t.seed;
    t.output_dir = ctx.resolve_path(hp("output_dir"), t.output_dir);
    if (t.logging_dir.empty()) t.logging_dir = (fs::path(t.output_dir) / "runs").string();
    c.output_dir = t.output_dir;
}

void validate_data(const YamlCtx& ctx, Job& job) {
    DataArgs& d = job.data;
    auto key = [](std::string_view k) { return join_path("data", k); };
    auto bad = [&](std::string_view k, const std::string& msg) {
        ctx.fail_key(key(k), fmt::format("{}: {}", key(k), msg));
    };
    const bool is_lm = job.task == Task::causal_lm || job.task == Task::masked_lm;
    if (job.task == Task::question_answering && !given(ctx, key("max_seq_length")))
        d.max_seq_length = 384;  // run_qa's default
    if (!given(ctx, key("packing"))) d.packing = job.task == Task::causal_lm;
    if (d.packing && !is_lm)
        bad("packing", fmt::format("packing joins texts into blocks, which only makes sense for "
                                   "causal-lm or masked-lm, not {}",
                                   enum_name(job.task)));
    if (d.pack_boundaries && job.task != Task::causal_lm)
        bad("pack_boundaries",
            fmt::format("keeps packed documents apart for causal-lm, not {}", enum_name(job.task)));
    if (d.pack_boundaries && !d.packing)
        bad("pack_boundaries",
            "keeps documents apart inside packed blocks, and data.packing is false (one "
            "truncated row per text has no boundaries to keep); set packing: true or drop "
            "pack_boundaries");
    if (d.max_seq_length < 2) bad("max_seq_length", "must be >= 2");
    if (d.pad_to_multiple_of < 0) bad("pad_to_multiple_of", "must be >= 0");
    if (!(d.mlm_probability > 0 && d.mlm_probability < 1))
        bad("mlm_probability", "must be in (0, 1)");
    if (job.task == Task::question_answering) {
        if (d.doc_stride < 1 || d.doc_stride >= d.max_seq_length)
            bad("doc_stride", fmt::format("must be in [1, max_seq_length = {}), got {}",
                                          d.max_seq_length, d.doc_stride));
        if (d.max_answer_length < 1) bad("max_answer_length", "must be >= 1");
    }
    if (job.task == Task::sequence_classification && d.label_column.empty())
        bad("label_column", "sequence-classification needs a label column");
    if (!d.label_map.empty() && job.task != Task::sequence_classification)
        bad("label_map",
            fmt::format("only applies to sequence-classification, not {}", enum_name(job.task)));
    if (d.text_column.empty()) bad("text_column", "must not be empty");
    // A chat template is a Jinja program (tokenizer_config.json); Loom has no
    // template engine, so conversations must arrive rendered.
    for (std::string_view k : {"text_column", "prompt_column", "completion_column"}) {
        const std::string& v = k == "text_column"     ? d.text_column
                               : k == "prompt_column" ? d.prompt_column
                                                      : d.completion_column;
        if (v == "messages")
            bad(k,
                "chat 'messages' records are not supported: rendering them needs the model's "
                "Jinja chat template, which Loom does not run; render the conversations to a "
                "text column, or to prompt and completion columns, first");
    }
    if (!d.prompt_column.empty()) {
        if (job.task != Task::causal_lm)
            bad("prompt_column", fmt::format("prompt/completion records are instruction data for "
                                             "causal-lm, not {}",
                                             enum_name(job.task)));
        if (d.completion_column.empty()) bad("completion_column", "must not be empty");
        if (d.completion_column == d.prompt_column)
            bad("completion_column", "must differ from prompt_column");
    }
}

void check_exists(const YamlCtx& ctx, const std::string& key, const std::string& path,
                  const std::string& what) {
    // s3:// and http(s):// locations are checked when they are opened.
    if (path.empty() || path.find("://") != std::string::npos || fs::exists(path)) return;
    ctx.fail_key(key, fmt::format("{}: {} '{}' not found", key, what, path));
}

void check_paths(const YamlCtx& ctx, const Job& job, const JobParseOptions& options) {
    const ModelArgs& m = job.model;
    // A Hub id: its files are checked once the command has resolved it.
    const bool hub = !m.hub_id.empty() && !fs::is_directory(m.path);
    if (!hub && !m.path.empty() && !fs::is_directory(m.path)) {
        std::string what = fs::exists(m.path) ? "is not a folder" : "not found";
        ctx.fail_key("model", fmt::format("model: '{}' {} (expected a Hugging Face folder with "
                                          "config.json, model.safetensors and tokenizer.json)",
                                          m.path, what));
    }
    if (!hub) check_exists(ctx, "model", m.config_path, "config file");
    if (!hub) check_exists(ctx, "model", m.tokenizer_path, "tokenizer file");
    if (!hub && !m.weights_path.empty() && !fs::exists(m.weights_path)) {
        fs::path bin = fs::path(m.weights_path).parent_path() / "pytorch_model.bin";
        std::string hint = fs::exists(bin) ? " (only pytorch_model.bin is there: save the model "
                                             "with safe_serialization=True)"
                                           : " (to pretrain from scratch, give model: {config, "
                                             "tokenizer} without weights)";
        ctx.fail_key("model", fmt::format("model: weights '{}' not found{}", m.weights_path, hint));
    }
    if (!options.evaluation_only) check_exists(ctx, "data.train", job.data.train, "training data");
    check_exists(ctx, "data.eval", job.data.eval, "eval data");
    const std::string& r = job.checkpoint.resume_from_checkpoint;
    if (r != "latest" && !options.evaluation_only)
        check_exists(ctx, hp("resume_from_checkpoint"), r, "checkpoint");
}

}  // namespace

void resolve_and_validate(const YamlCtx& ctx, Job& job, const JobParseOptions& options) {
    apply_hf_switches(ctx, job, options);
    validate_data(ctx, job);
    validate_training(ctx, job);
    validate_peft(ctx, job);
    if (options.check_paths) check_paths(ctx, job, options);
    add_job_notes(ctx, job);
}

}  // namespace loom::config
