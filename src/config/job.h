// The training job: one YAML file parsed into per-component structs, so each
// component receives only its own arguments (ModelArgs to the model loader,
// DataArgs to the readers and collators, TrainingArgs to the trainer loop,
// DistributionArgs to the topology, CheckpointArgs to checkpoint IO).
//
// Key names are Hugging Face TrainingArguments / SageMaker model-parallel
// names verbatim, with HF's defaults. Everything is resolved after parsing:
// relative paths are absolute, defaults that depend on other keys are filled
// (eval_steps <- logging_steps, metric_for_best_model, packing), so consumers
// never re-derive them. job_to_yaml dumps exactly this resolved state.
//
// Not here: reading files the job points to (data/, io/), or the arithmetic
// that turns epochs into steps (config/step_plan.h).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/sample_by.h"
#include "core/schedule_kind.h"
#include "core/task.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"

namespace loom {

// One string table per enum, used by the parser, the dumper and logs.
template <class E>
struct EnumTable;

// A job's task: core/task.h's values but `base` (a model without a head).
template <>
struct EnumTable<Task> {
    static constexpr std::array<std::string_view, 4> names = {k_task_names[0], k_task_names[1],
                                                              k_task_names[2], k_task_names[3]};
};

// HF IntervalStrategy: when to log, evaluate or save.
enum class IntervalStrategy { no, steps, epoch };
template <>
struct EnumTable<IntervalStrategy> {
    static constexpr std::array<std::string_view, 3> names = {"no", "steps", "epoch"};
};

// `optim`: HF's adamw_torch / adamw_hf / adamw_torch_fused all mean adamw
// here (OptimizerKind is declared with the optimizers).
template <>
struct EnumTable<OptimizerKind> {
    static constexpr std::array<std::string_view, 3> names = {"adamw", "lamb", "sgd"};
};

template <>
struct EnumTable<LrSchedulerType> {
    static constexpr auto names = k_lr_scheduler_names;
};

// Pipeline schedule. In Loom's own keys `interleaved` is Megatron's
// interleaved 1F1B over `virtual_stages` model chunks per rank; SMP's
// `pipeline: interleaved` means plain 1F1B and is mapped to one_f_one_b.
template <>
struct EnumTable<ScheduleKind> {
    static constexpr auto names = k_schedule_kind_names;
};

// SampleBy (plain-text records) is declared in core, for the readers too.
template <>
struct EnumTable<SampleBy> {
    static constexpr auto names = k_sample_by_names;
};

template <class E>
std::string_view enum_name(E e) {
    return EnumTable<E>::names[static_cast<size_t>(e)];
}

template <class E>
std::optional<E> enum_from_name(std::string_view name) {
    for (size_t i = 0; i < EnumTable<E>::names.size(); ++i)
        if (EnumTable<E>::names[i] == name) return static_cast<E>(i);
    return std::nullopt;
}

struct ModelArgs {
    std::string path;            // the HF folder, empty when given file by file
    std::string config_path;     // config.json
    std::string tokenizer_path;  // tokenizer.json
    std::string weights_path;    // model.safetensors; empty = pretrain from scratch
    // `model:` named something that is no folder here and reads as a Hub
    // model id (org/name): the command resolves it to a snapshot folder in
    // the Hugging Face cache (cli/hub_model.h) and replaces the paths above,
    // which until then name a folder that does not exist.
    std::string hub_id;
    std::string revision;  // branch, tag or commit; empty = main
    // The id says where the files came from; the paths are the setting.
    bool operator==(const ModelArgs& o) const {
        return path == o.path && config_path == o.config_path &&
               tokenizer_path == o.tokenizer_path && weights_path == o.weights_path;
    }
};

struct DataArgs {
    std::string train;  // a file or a folder of files; empty = none
    std::string eval;
    std::string text_column = "text";
    std::string text_pair_column;  // empty = single-sequence input
    std::string label_column = "label";
    // Causal-LM instruction data (TRL's prompt-completion format): a non-empty
    // prompt_column reads records of a prompt and a completion; the loss
    // counts the completion (and the end token) only.
    std::string prompt_column;
    std::string completion_column = "completion";
    // Raw label (as written in the data, integers in decimal) -> label name,
    // in the order of the job file. Empty = labels used as they are.
    std::vector<std::pair<std::string, std::string>> label_map;
    // Question answering columns for JSONL/CSV input (HF run_qa names);
    // SQuAD JSON files carry their own structure.
    std::string question_column = "question";
    std::string context_column = "context";
    std::string answers_column = "answers";
    std::string id_column = "id";
    int64_t max_seq_length = 128;  // default 384 for question-answering (run_qa)
    int64_t doc_stride = 128;
    int64_t max_answer_length = 30;
    double mlm_probability = 0.15;
    int64_t pad_to_multiple_of = 0;  // 0 = no rounding
    bool packing = false;            // default true for causal-lm (run_clm's group_texts)
    // Causal LM with packing: each text stays a document of its own inside a
    // block (positions restart, attention stays within it, its first token
    // is no target), as HF's DataCollatorWithFlattening.
    bool pack_boundaries = false;
    bool skip_bad_lines = false;
    SampleBy sample_by = SampleBy::line;
    bool operator==(const DataArgs&) const = default;
};

// HF TrainingArguments, same names, same defaults.
struct TrainingArgs {
    std::string output_dir = "trainer_output";
    std::string logging_dir;  // default <output_dir>/runs
    bool overwrite_output_dir = false;
    double num_train_epochs = 3.0;
    int64_t max_steps = -1;  // > 0 overrides num_train_epochs
    int64_t per_device_train_batch_size = 8;
    int64_t per_device_eval_batch_size = 8;
    int64_t gradient_accumulation_steps = 1;
    double learning_rate = 5e-5;
    double weight_decay = 0.0;
    double adam_beta1 = 0.9;
    double adam_beta2 = 0.999;
    double adam_epsilon = 1e-8;
    double max_grad_norm = 1.0;
    LrSchedulerType lr_scheduler_type = LrSchedulerType::linear;
    // lr_scheduler_kwargs (HF): polynomial lr_end/power, cosine num_cycles.
    double lr_end = 1e-7;
    double power = 1.0;
    std::optional<double> num_cycles;
    double warmup_ratio = 0.0;
    int64_t warmup_steps = 0;
    OptimizerKind optim = OptimizerKind::adamw;
    int64_t seed = 42;
    int64_t data_seed = 42;  // defaults to seed
    IntervalStrategy logging_strategy = IntervalStrategy::steps;
    double logging_steps = 500;  // < 1: a ratio of the total steps (HF)
    bool logging_first_step = false;
    IntervalStrategy eval_strategy = IntervalStrategy::no;
    double eval_steps = 500;  // defaults to logging_steps
    bool load_best_model_at_end = false;
    std::string metric_for_best_model;    // "loss" when needed and unset
    bool greater_is_better = false;       // false iff the metric ends in "loss"
    int64_t early_stopping_patience = 0;  // 0 = no early stopping
    double early_stopping_threshold = 0.0;
    bool bf16 = false;
    bool fp16 = false;
    // HF's use_cpu: train on the CPU even when this build has CUDA and a GPU
    // is visible (otherwise a whole-model AdamW job in fp32 or bf16 runs on GPU 0).
    bool use_cpu = false;
    bool dataloader_drop_last = false;
    bool disable_tqdm = false;
    bool operator==(const TrainingArgs&) const = default;
};

struct CheckpointArgs {
    std::string output_dir;  // = TrainingArgs::output_dir; checkpoints go to checkpoint-<step>/
    IntervalStrategy save_strategy = IntervalStrategy::steps;
    double save_steps = 500;
    int64_t save_total_limit = 0;  // 0 = keep all (HF None)
    // "" = start fresh, "latest" = newest checkpoint in output_dir, else a path.
    std::string resume_from_checkpoint;
    std::string checkpoint_uri;  // reserved: where checkpoints are mirrored
    bool operator==(const CheckpointArgs&) const = default;
};

// One shape for every way of writing the `distribution` block: Loom's keys,
// SageMaker's smdistributed.dataparallel and smdistributed.modelparallel.
struct DistributionArgs {
    int64_t data_parallel_degree = 0;  // 0 = world size / (tp * pp)
    int64_t zero_stage = 0;            // 0, 1 (optimizer state) or 2 (+ gradients)
    double bucket_size_mb = 25.0;      // gradient all-reduce bucket (PyTorch DDP's default)
    bool overlap_comm = true;
    // Data parallel on the CPU: the word embeddings' lookup gradient as rows,
    // exchanged after backward, so the table is reduced during backward.
    bool sparse_embedding_grads = true;
    int64_t tensor_parallel_degree = 1;
    int64_t pipeline_parallel_degree = 1;
    int64_t microbatches = 1;
    ScheduleKind pipeline = ScheduleKind::one_f_one_b;
    int64_t virtual_stages = 1;
    // "cluster", "spread" or a permutation of D, P, T (SMP): which axis varies
    // slowest across ranks.
    std::string placement_strategy = "cluster";
    bool activation_checkpointing = false;
    int64_t checkpoint_every = 1;  // checkpoint every k-th transformer block
    bool offload_activations = false;
    int64_t activation_loading_horizon = 4;
    std::vector<int64_t> partition;       // blocks per pipeline stage; empty = even split
    double collective_timeout_s = 300.0;  // a dead or stalled rank stops the job after this
    // `distribution: auto`: the degrees, micro-batches, schedule and
    // checkpointing are chosen at launch by the layout planner for the world
    // size (train/auto_layout.h); the keys below bound or direct that choice.
    bool auto_layout = false;
    std::string machine;  // GPU profile (name or YAML file) to plan for; "" = this host's CPU
    int64_t max_tensor_parallel_degree = 0;    // 0 = no bound
    int64_t max_pipeline_parallel_degree = 0;  // 0 = no bound
    bool smddp = false;                   // written as smdistributed.dataparallel
    bool smp = false;                     // written as smdistributed.modelparallel
    // SageMaker's `mpi` block. Ranks are started by the launcher, so these
    // are checked against the run (config/launch_check.h), never applied.
    bool mpi_enabled = false;
    int64_t processes_per_host = 0;  // 0 = not given
    std::string custom_mpi_options;
    // SMP keys accepted for compatibility that change nothing in Loom
    // (e.g. optimize, skip_tracing); Job::notes says why for each.
    std::vector<std::string> ignored_keys;
    bool operator==(const DistributionArgs&) const = default;
};

// HF TrainingArguments' hub_strategy: what each push uploads.
enum class HubStrategy { end, every_save, checkpoint, all_checkpoints };
template <>
struct EnumTable<HubStrategy> {
    static constexpr std::array<std::string_view, 4> names = {"end", "every_save", "checkpoint",
                                                              "all_checkpoints"};
};

// HF TrainingArguments' push_to_hub keys (train/hub_push.h). Not part of the
// job's identity or its dump: where a model is published does not change
// the training, and hub_token must never be written out.
struct HubArgs {
    bool push_to_hub = false;
    std::string hub_model_id;  // default: the output_dir's folder name
    HubStrategy hub_strategy = HubStrategy::every_save;
    std::string hub_token;     // default: HF_TOKEN or the token file
    bool hub_private_repo = false;
    bool hub_always_push = false;
};

// How the final model folder is written (save_pretrained's options). Not
// part of the job's identity: the format does not change the training.
struct SaveArgs {
    bool save_safetensors = true;       // HF TrainingArguments; false is noted (Loom writes safetensors)
    std::string max_shard_size = "5GB";  // save_pretrained: past this, model-0000i-of-0000n shards
    // The final model's weight type (config.json's torch_dtype); nullopt
    // ("auto"): the type of the weights the job started from.
    std::optional<DType> export_dtype;
};

// `peft:` a LoRA adapter, with PEFT's LoraConfig names (docs/job-file.md).
// Only these keys are read; PEFT options Loom lacks (DoRA, rsLoRA, bias
// training, dropout on the adapter's input) are refused by name.
struct PeftArgs {
    bool enabled = false;  // the job has a peft: block
    int64_t r = 8;
    double lora_alpha = 8;
    double lora_dropout = 0;
    std::vector<std::string> target_modules;   // empty: the family's PEFT default
    std::vector<std::string> modules_to_save;  // trained in full (a classifier head)
    // The final folder holds the merged model (W + B A * alpha / r) instead
    // of adapter_model.safetensors + adapter_config.json.
    bool merge_adapters = false;
    bool operator==(const PeftArgs&) const = default;
};

struct Job {
    std::string source;  // the job file's path, or "<string>"
    Task task = Task::sequence_classification;
    ModelArgs model;
    DataArgs data;
    TrainingArgs training;
    DistributionArgs distribution;
    CheckpointArgs checkpoint;
    HubArgs hub;
    SaveArgs save;
    PeftArgs peft;
    // Lines for the start of the log: the precision, synonyms applied, and
    // every accepted key that changes nothing here, with the reason. Not
    // part of equality (they describe the job, they are not settings).
    std::vector<std::string> notes;
    // Where each key was written ("job.yaml:12", or "--set a.b=1"), for
    // checks made after parsing (config/launch_check.h).
    std::map<std::string, std::string> locations;
    bool operator==(const Job& o) const {
        return task == o.task && model == o.model && data == o.data && training == o.training &&
               distribution == o.distribution && checkpoint == o.checkpoint && peft == o.peft;
    }
};

struct JobParseOptions {
    // Check that the model and data paths exist (off in tests that only
    // exercise key handling).
    bool check_paths = true;
    // Folder that relative paths from --set resolve against; empty = the
    // current directory.
    std::string override_base_dir;
    // How errors name each override, in the order of `overrides`; missing
    // entries read "--set key=value" (e.g. a SageMaker hyperparameter instead).
    std::vector<std::string> override_labels;
    // Set by `loom train`, which honours HF's do_train / do_eval switches:
    // do_train: false is an error there (use `loom eval`), do_eval: false
    // leaves data.eval unread. Other commands read the job for its model and
    // data and leave both switches alone.
    bool for_training = false;
    // `loom plan` prices a model from its config alone: no tokenizer needed.
    bool model_config_only = false;
    // Set by `loom eval`, which reads neither data.train nor a checkpoint to
    // resume: those paths need not exist on the machine that evaluates.
    bool evaluation_only = false;
};

// Parses a job file; `overrides` are "dotted.key=value" strings (--set),
// validated like the file. Throws loom::Error naming file:line (or the --set
// argument), the key and what was expected.
Job job_load(const std::string& path, const std::vector<std::string>& overrides = {},
             const JobParseOptions& options = {});

// Where a key written without a section belongs when it is given on its own
// (a SageMaker hyperparameter): "learning_rate" -> "hyperparameters.learning_rate",
// "max_seq_length" -> "data.max_seq_length"; top-level keys, dotted paths and
// unknown names come back unchanged (the parser then reports them as the job
// file would, with the same hints).
std::string job_key_path(const std::string& key);

// The same from text; `source_name` labels errors and `base_dir` resolves
// relative paths.
Job job_parse(const std::string& yaml_text, const std::string& source_name,
              const std::string& base_dir, const std::vector<std::string>& overrides = {},
              const JobParseOptions& options = {});

// The resolved job as YAML that job_parse reads back to an equal Job.
std::string job_to_yaml(const Job& job);

}  // namespace loom
