// Hugging Face and SageMaker names that mean a Loom key, and HF's switches:
//
//   hyperparameters.gradient_checkpointing  -> distribution.activation_checkpointing
//   checkpoint_s3_uri (SageMaker estimator) -> checkpoint_uri
//   hyperparameters.report_to               TensorBoard events are always written;
//                                           other integrations are not available
//   hyperparameters.do_train / do_eval      `loom train` always trains (do_train:
//                                           false is an error there); do_eval:
//                                           false leaves data.eval unread
//
// A synonym and its Loom key may both be written only with the same value;
// otherwise the error names both keys, values and lines. HF's own rule that
// an eval_strategy other than "no" turns do_eval on is kept as a conflict:
// do_eval: false beside eval_strategy: steps is an error, not a silent choice.
#include <algorithm>
#include <array>

#include "config/job_sections.h"

namespace loom::config {

namespace {

const char* const k_hp = "hyperparameters";

std::string hp(std::string_view key) {
    return join_path(k_hp, key);
}

// HF's report_to integrations; none of them exists in Loom.
constexpr std::array<std::string_view, 12> k_hf_integrations = {
    "azure_ml", "clearml", "codecarbon", "comet_ml", "dagshub", "dvclive",
    "flyte",    "mlflow",  "neptune",    "swanlab",  "trackio", "wandb"};

bool is_hf_integration(std::string_view name) {
    return std::find(k_hf_integrations.begin(), k_hf_integrations.end(), name) !=
           k_hf_integrations.end();
}

void check_report_to_name(const YamlCtx& ctx, const YAML::Node& node, const std::string& path) {
    const std::string v = read_string(ctx, node, path);
    if (v == "tensorboard" || v == "all" || v == "none" || is_hf_integration(v)) return;
    std::vector<std::string_view> names = {"tensorboard", "all", "none"};
    names.insert(names.end(), k_hf_integrations.begin(), k_hf_integrations.end());
    const std::string guess = nearest_key(v, names);
    const std::string hint = edit_distance(v, guess) <= std::max<int>(1, int(v.size()) / 3)
                                 ? fmt::format("; did you mean '{}'?", guess)
                                 : "";
    ctx.fail(path, node,
             fmt::format("{}: '{}' is not an integration (expected tensorboard, all or none, or "
                         "one of Hugging Face's: wandb, mlflow, ...){}",
                         path, v, hint));
}

// "true", "'s3://a'" for conflict messages.
std::string shown(const YAML::Node& node) {
    return node.IsScalar() ? node.Scalar() : describe(node);
}

}  // namespace

void read_report_to(const YamlCtx& ctx, const YAML::Node& node, const std::string& path) {
    if (node.IsNull()) return;
    if (!node.IsSequence()) return check_report_to_name(ctx, node, path);
    for (size_t i = 0; i < node.size(); ++i)
        check_report_to_name(ctx, node[i], fmt::format("{}[{}]", path, i));
}

void apply_top_level_synonyms(const YamlCtx& ctx, Job& job) {
    if (!ctx.given("checkpoint_s3_uri")) return;
    const std::string uri = read_string(ctx, ctx.seen.at("checkpoint_s3_uri"), "checkpoint_s3_uri");
    if (ctx.given("checkpoint_uri") && job.checkpoint.checkpoint_uri != uri)
        ctx.fail_key(
            "checkpoint_s3_uri",
            fmt::format("checkpoint_s3_uri: '{}' disagrees with checkpoint_uri: '{}' "
                        "({}); checkpoint_s3_uri is SageMaker's name for it: keep one "
                        "of them",
                        uri, job.checkpoint.checkpoint_uri, ctx.where_key("checkpoint_uri")));
    job.checkpoint.checkpoint_uri = uri;
}

void apply_gradient_checkpointing(const YamlCtx& ctx, DistributionArgs& d) {
    const std::string key = hp("gradient_checkpointing");
    if (ctx.given(key)) d.activation_checkpointing = read_bool(ctx, ctx.seen.at(key), key);
}

void check_gradient_checkpointing(const YamlCtx& ctx, const DistributionArgs& d) {
    const std::string key = hp("gradient_checkpointing");
    if (!ctx.given(key)) return;
    const bool hf = read_bool(ctx, ctx.seen.at(key), key);
    // SMP's parameter counts only when modelparallel is enabled (it is
    // read, not applied, otherwise).
    std::vector<std::string> others = {"distribution.activation_checkpointing"};
    if (d.smp)
        others.push_back(
            "distribution.smdistributed.modelparallel.parameters.activation_checkpointing");
    for (const std::string& other : others) {
        if (!ctx.given(other) || read_bool(ctx, ctx.seen.at(other), other) == hf) continue;
        ctx.fail_key(key, fmt::format("{}: {} disagrees with {}: {} ({}); gradient_checkpointing "
                                      "is Hugging Face's name for it: keep one of them",
                                      key, shown(ctx.seen.at(key)), other,
                                      shown(ctx.seen.at(other)), ctx.where_key(other)));
    }
    ctx.notes.push_back(
        fmt::format("{}: {} is applied as distribution.activation_checkpointing: {}{}", key,
                    shown(ctx.seen.at(key)), hf ? "true" : "false",
                    hf ? fmt::format(" (checkpoint_every {})", d.checkpoint_every) : ""));
}

void apply_hf_switches(const YamlCtx& ctx, Job& job, const JobParseOptions& options) {
    const std::string train_key = hp("do_train"), eval_key = hp("do_eval");
    if (ctx.given(train_key) && !read_bool(ctx, ctx.seen.at(train_key), train_key) &&
        options.for_training)
        ctx.fail_key(train_key,
                     fmt::format("{}: false, but loom train always trains; to evaluate the model "
                                 "without training run: loom eval {}",
                                 train_key, ctx.file));
    if (!ctx.given(eval_key)) return;
    const bool do_eval = read_bool(ctx, ctx.seen.at(eval_key), eval_key);
    if (!do_eval) {
        for (std::string_view s : {"eval_strategy", "evaluation_strategy"}) {
            const std::string key = hp(s);
            if (ctx.given(key) && job.training.eval_strategy != IntervalStrategy::no)
                ctx.fail_key(eval_key,
                             fmt::format("{}: false disagrees with {}: {} ({}), which evaluates "
                                         "during training (Hugging Face turns do_eval on for "
                                         "it): keep one of them",
                                         eval_key, key, enum_name(job.training.eval_strategy),
                                         ctx.where_key(key)));
        }
        if (options.for_training && !job.data.eval.empty()) {
            ctx.notes.push_back(
                fmt::format("{}: false: data.eval ({}) is not read and the model "
                            "is not evaluated",
                            eval_key, job.data.eval));
            job.data.eval.clear();
        }
        return;
    }
    if (job.data.eval.empty())
        ctx.fail_key(eval_key, fmt::format("{}: true needs an eval set: add data.eval", eval_key));
    if (options.for_training)
        ctx.notes.push_back(fmt::format(
            "{}: true: data.eval is evaluated after the last step{} (Loom does this whenever "
            "data.eval is given)",
            eval_key,
            job.training.eval_strategy == IntervalStrategy::no
                ? ""
                : fmt::format(" and every {}", job.training.eval_strategy == IntervalStrategy::epoch
                                                   ? "epoch"
                                                   : "eval_steps")));
}

}  // namespace loom::config
