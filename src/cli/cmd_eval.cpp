// `loom eval job.yaml [--set key=value ...]`: evaluates the job's model on its
// eval channel with the task's metrics and prints them (HF eval_* names), one
// JSON object on stdout with --json.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/hub_model.h"
#include "config/job.h"
#include "core/check.h"
#include "core/runtime.h"
#include "train/trainer.h"

namespace loom::cli {

namespace {

struct EvalCmdOptions {
    std::string job_path;
    std::vector<std::string> overrides;
    int threads = 0;
    bool json = false;
};

void run_eval(const EvalCmdOptions& o) {
    if (o.threads > 0) runtime_init({o.threads});
    runtime_pin_threads();
    JobParseOptions parse;
    parse.evaluation_only = true;
    Job job = job_load(o.job_path, o.overrides, parse);
    resolve_hub_model(job);
    LOOM_CHECK(!job.data.eval.empty(), "{}: data.eval is not set: nothing to evaluate",
               o.job_path);
    // Evaluation reads neither the training set nor a checkpoint to resume.
    job.data.train.clear();
    job.checkpoint.resume_from_checkpoint.clear();
    TrainerOptions topts;
    topts.quiet = true;
    topts.evaluation_only = true;
    Trainer trainer(std::move(job), topts);
    const EvalOutput ev = trainer.evaluate(false);
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : ev.metrics) j["eval_" + k] = v;
    if (o.json) {
        fmt::print("{}\n", j.dump());
        return;
    }
    fmt::print("evaluated {} samples of {} with {}\n", ev.samples,
               trainer.model_config().architecture, o.job_path);
    for (const auto& [k, v] : ev.metrics) fmt::print("  eval_{:<20} {:.6g}\n", k, v);
}

void setup_eval(CLI::App& app) {
    auto o = std::make_shared<EvalCmdOptions>();
    CLI::App* sub = app.add_subcommand("eval", "Evaluate a model on a job's eval data");
    sub->footer(R"(
Uses the job's model, task and data.eval (data.train is not read). To evaluate
a trained output folder: loom eval job.yaml --set model=OUTPUT_DIR
Metrics: classification accuracy, f1, precision, recall (macro); QA exact_match
and f1 (SQuAD); masked/causal LM loss, perplexity and token accuracy.
)");
    sub->add_option("job", o->job_path, "job file (YAML)")->required();
    sub->add_option("--set", o->overrides, "override a key (repeatable)")->take_all();
    sub->add_option("--threads", o->threads, "CPU threads");
    sub->add_flag("--json", o->json, "print the metrics as one JSON object");
    sub->callback([o] { run_eval(*o); });
}

}  // namespace

LOOM_COMMAND(setup_eval);

}  // namespace loom::cli
