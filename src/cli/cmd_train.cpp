// `loom train job.yaml [--set key=value ...]`: runs a training job (train/trainer.h).
// Exit status 0 when training completes, stops early, or is interrupted by
// SIGINT/SIGTERM after checkpointing (the message says how to resume).
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "config/job.h"
#include "core/runtime.h"
#include "train/trainer.h"

namespace loom::cli {

namespace {

struct TrainOptions {
    std::string job_path;
    std::vector<std::string> overrides;
    int threads = 0;
    bool quiet = false;
};

void run_train(const TrainOptions& o) {
    if (o.threads > 0) runtime_init({o.threads});
    Job job = job_load(o.job_path, o.overrides);
    TrainerOptions topts;
    topts.quiet = o.quiet;
    Trainer trainer(std::move(job), topts);
    trainer.train();
}

void setup_train(CLI::App& app) {
    auto o = std::make_shared<TrainOptions>();
    CLI::App* sub = app.add_subcommand("train", "Train or fine-tune a model from a job file");
    sub->footer(R"(
The job file (YAML) names the model folder (or a config.json and tokenizer.json
to pretrain from scratch), the task (masked-lm, sequence-classification,
question-answering, causal-lm), the data channels and Hugging Face
TrainingArguments under `hyperparameters`. Example:

  model: tests/data/hf/bert-cls
  task: sequence-classification
  data: {train: train.jsonl, eval: eval.jsonl, max_seq_length: 128}
  hyperparameters: {output_dir: out, num_train_epochs: 3, learning_rate: 5e-5,
                    eval_strategy: epoch, save_strategy: epoch}

Output: output_dir/ becomes a Hugging Face folder (config.json,
model.safetensors, tokenizer.json), with checkpoint-<step>/ folders,
metrics.jsonl, TensorBoard events in runs/ and report.html.
Ctrl-C (or SIGTERM) finishes the step, writes a checkpoint and exits 0;
continue with --set hyperparameters.resume_from_checkpoint=latest.
See examples/*.yaml.
)");
    sub->add_option("job", o->job_path, "job file (YAML)")->required();
    sub->add_option("--set", o->overrides,
                    "override a key, e.g. --set hyperparameters.learning_rate=3e-5 (repeatable)")
        ->take_all();
    sub->add_option("--threads", o->threads, "CPU threads (default: all cores or OMP_NUM_THREADS)");
    sub->add_flag("--quiet", o->quiet, "no progress bar or messages");
    sub->callback([o] { run_train(*o); });
}

}  // namespace

LOOM_COMMAND(setup_train);

}  // namespace loom::cli
