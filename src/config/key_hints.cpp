// Hints for unknown keys (see key_hints.h). The synonym table holds names
// people carry over from Hugging Face example scripts and TrainingArguments'
// older spellings, SageMaker estimators, Megatron/DeepSpeed and torchrun.
#include "config/key_hints.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>

#include "config/yaml_reader.h"

namespace loom::config {

namespace {

struct Synonym {
    std::string_view key;     // as written, lower case with '_' for '-'
    std::string_view target;  // dotted path of Loom's key; "" = none, see `why`
    std::string_view why;     // appended in parentheses; may be empty
};

constexpr std::string_view k_ranks_from_launcher =
    "the number of ranks comes from the launcher: loom launch --nproc N job.yaml, "
    "mpirun -np N loom train job.yaml or srun";
constexpr std::string_view k_per_rank_batch =
    "per rank; the global batch is this x gradient_accumulation_steps x data-parallel ranks";
constexpr std::string_view k_model_folder =
    "a Hugging Face model folder with config.json, model.safetensors and tokenizer.json";

constexpr std::array k_synonyms = {
    Synonym{"epochs", "hyperparameters.num_train_epochs", ""},
    Synonym{"num_epochs", "hyperparameters.num_train_epochs", ""},
    Synonym{"n_epochs", "hyperparameters.num_train_epochs", ""},
    Synonym{"max_epochs", "hyperparameters.num_train_epochs", ""},
    Synonym{"train_epochs", "hyperparameters.num_train_epochs", ""},
    Synonym{"steps", "hyperparameters.max_steps", ""},
    Synonym{"train_steps", "hyperparameters.max_steps", ""},
    Synonym{"num_steps", "hyperparameters.max_steps", ""},
    Synonym{"num_train_steps", "hyperparameters.max_steps", ""},
    Synonym{"max_train_steps", "hyperparameters.max_steps", ""},
    Synonym{"total_steps", "hyperparameters.max_steps", ""},
    Synonym{"training_steps", "hyperparameters.max_steps", ""},
    Synonym{"train_iters", "hyperparameters.max_steps", ""},
    Synonym{"lr", "hyperparameters.learning_rate", ""},
    Synonym{"learningrate", "hyperparameters.learning_rate", ""},
    Synonym{"base_lr", "hyperparameters.learning_rate", ""},
    Synonym{"batch_size", "hyperparameters.per_device_train_batch_size", k_per_rank_batch},
    Synonym{"train_batch_size", "hyperparameters.per_device_train_batch_size", k_per_rank_batch},
    Synonym{"per_gpu_train_batch_size", "hyperparameters.per_device_train_batch_size",
            k_per_rank_batch},
    Synonym{"micro_batch_size", "hyperparameters.per_device_train_batch_size", k_per_rank_batch},
    Synonym{"per_device_batch_size", "hyperparameters.per_device_train_batch_size",
            k_per_rank_batch},
    Synonym{"eval_batch_size", "hyperparameters.per_device_eval_batch_size", ""},
    Synonym{"per_gpu_eval_batch_size", "hyperparameters.per_device_eval_batch_size", ""},
    Synonym{"grad_accum", "hyperparameters.gradient_accumulation_steps", ""},
    Synonym{"gradient_accumulation", "hyperparameters.gradient_accumulation_steps", ""},
    Synonym{"accumulate_grad_batches", "hyperparameters.gradient_accumulation_steps", ""},
    Synonym{"clip_grad_norm", "hyperparameters.max_grad_norm", ""},
    Synonym{"gradient_clipping", "hyperparameters.max_grad_norm", ""},
    Synonym{"grad_clip", "hyperparameters.max_grad_norm", ""},
    Synonym{"optimizer", "hyperparameters.optim", ""},
    Synonym{"scheduler", "hyperparameters.lr_scheduler_type", ""},
    Synonym{"lr_scheduler", "hyperparameters.lr_scheduler_type", ""},
    Synonym{"warmup", "hyperparameters.warmup_steps", "or warmup_ratio"},
    Synonym{"num_warmup_steps", "hyperparameters.warmup_steps", ""},
    Synonym{"random_seed", "hyperparameters.seed", ""},
    Synonym{"output_path", "hyperparameters.output_dir", ""},
    Synonym{"out_dir", "hyperparameters.output_dir", ""},
    Synonym{"save_dir", "hyperparameters.output_dir", ""},
    Synonym{"evaluate_steps", "hyperparameters.eval_steps", ""},
    Synonym{"evaluation_steps", "hyperparameters.eval_steps", ""},
    Synonym{"eval_every", "hyperparameters.eval_steps", ""},
    Synonym{"evaluation", "hyperparameters.eval_strategy", ""},
    Synonym{"save_every", "hyperparameters.save_steps", ""},
    Synonym{"log_steps", "hyperparameters.logging_steps", ""},
    Synonym{"log_every", "hyperparameters.logging_steps", ""},
    Synonym{"no_cuda", "hyperparameters.use_cpu", "Hugging Face's older name for it"},
    Synonym{"mixed_precision", "hyperparameters.bf16", "or fp16: true"},
    Synonym{"precision", "hyperparameters.bf16", "or fp16: true; fp32 is the default"},
    Synonym{"resume", "hyperparameters.resume_from_checkpoint", ""},
    Synonym{"model_name_or_path", "model", k_model_folder},
    Synonym{"pretrained_model_name_or_path", "model", k_model_folder},
    Synonym{"model_name", "model", k_model_folder},
    Synonym{"model_path", "model", k_model_folder},
    Synonym{"model_id", "model", k_model_folder},
    Synonym{"tokenizer_name", "model.tokenizer", "a tokenizer.json file"},
    Synonym{"tokenizer_name_or_path", "model.tokenizer", "a tokenizer.json file"},
    Synonym{"config_name", "model.config", "a config.json file"},
    Synonym{"train_file", "data.train", ""},
    Synonym{"train_path", "data.train", ""},
    Synonym{"train_data", "data.train", ""},
    Synonym{"training_data", "data.train", ""},
    Synonym{"validation_file", "data.eval", ""},
    Synonym{"validation", "data.eval", ""},
    Synonym{"eval_file", "data.eval", ""},
    Synonym{"eval_data", "data.eval", ""},
    Synonym{"dataset", "data", ""},
    Synonym{"datasets", "data", ""},
    Synonym{"dataset_name", "data.train",
            "Loom reads local or s3:// files and folders, not datasets by hub name"},
    Synonym{"max_seq_len", "data.max_seq_length", ""},
    Synonym{"max_length", "data.max_seq_length", ""},
    Synonym{"seq_length", "data.max_seq_length", ""},
    Synonym{"seq_len", "data.max_seq_length", ""},
    Synonym{"block_size", "data.max_seq_length", ""},
    Synonym{"text_column_name", "data.text_column", ""},
    Synonym{"label_column_name", "data.label_column", ""},
    Synonym{"mlm_prob", "data.mlm_probability", ""},
    Synonym{"num_labels", "",
            "the classes come from the labels in the data, or from data.label_map"},
    Synonym{"hyperparams", "hyperparameters", ""},
    Synonym{"hparams", "hyperparameters", ""},
    Synonym{"training_args", "hyperparameters", ""},
    Synonym{"training_arguments", "hyperparameters", ""},
    Synonym{"distributed", "distribution", ""},
    Synonym{"parallelism", "distribution", ""},
    Synonym{"checkpoint_s3_uri", "checkpoint_uri", ""},
    Synonym{"gradient_checkpointing", "distribution.activation_checkpointing", ""},
    Synonym{"processes_per_host", "distribution.mpi.processes_per_host",
            "ranks per host are started by the launcher, loom launch --nproc N or mpirun -np N; "
            "the job can only check the count"},
    Synonym{"nproc_per_node", "distribution.mpi.processes_per_host",
            "ranks per host are started by the launcher, loom launch --nproc N or mpirun -np N; "
            "the job can only check the count"},
    Synonym{"instance_count", "", k_ranks_from_launcher},
    Synonym{"num_processes", "", k_ranks_from_launcher},
    Synonym{"nproc", "", k_ranks_from_launcher},
    Synonym{"world_size", "", k_ranks_from_launcher},
    Synonym{"num_gpus", "", k_ranks_from_launcher},
    Synonym{"n_gpu", "", k_ranks_from_launcher},
    Synonym{"local_rank", "", "each rank learns its place from the launcher"},
    Synonym{"tensor_parallel_size", "distribution.tensor_parallel_degree", ""},
    Synonym{"tensor_model_parallel_size", "distribution.tensor_parallel_degree", ""},
    Synonym{"tp_size", "distribution.tensor_parallel_degree", ""},
    Synonym{"pipeline_parallel_size", "distribution.pipeline_parallel_degree", ""},
    Synonym{"pipeline_model_parallel_size", "distribution.pipeline_parallel_degree", ""},
    Synonym{"pp_size", "distribution.pipeline_parallel_degree", ""},
    Synonym{"partitions", "distribution.pipeline_parallel_degree",
            "SMP's older name, accepted under smdistributed.modelparallel.parameters"},
    Synonym{"data_parallel_size", "distribution.data_parallel_degree", ""},
    Synonym{"dp_size", "distribution.data_parallel_degree", ""},
    Synonym{"num_microbatches", "distribution.microbatches", ""},
    Synonym{"micro_batches", "distribution.microbatches", ""},
    Synonym{"zero", "distribution.zero_stage", ""},
    Synonym{"zero_optimization", "distribution.zero_stage", ""},
    Synonym{"deepspeed", "distribution.zero_stage",
            "Loom has its own ZeRO stages 1 and 2; DeepSpeed configs are not read"},
    Synonym{"fsdp", "distribution.zero_stage",
            "Loom shards optimizer state (1) and gradients (2); parameters are split by "
            "tensor_parallel_degree and pipeline_parallel_degree"},
};

std::string normalise(std::string_view key) {
    std::string s(key);
    for (char& c : s) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (c == '-') c = '_';
    }
    return s;
}

const Synonym* find_synonym(std::string_view key) {
    const std::string k = normalise(key);
    for (const auto& s : k_synonyms)
        if (s.key == k) return &s;
    return nullptr;
}

// A path as seen from `section`: "hyperparameters.max_steps" is "max_steps"
// inside hyperparameters and stays whole anywhere else.
std::string relative_to(const std::string& section, std::string_view target) {
    if (!section.empty() && target.size() > section.size() && target.starts_with(section) &&
        target[section.size()] == '.')
        return std::string(target.substr(section.size() + 1));
    return std::string(target);
}

// Small sections are listed whole when nothing fits; a list of fifty
// hyperparameters would bury the message.
constexpr size_t k_max_listed = 8;

}  // namespace

std::string synonym_target(std::string_view key) {
    const Synonym* s = find_synonym(key);
    return s ? std::string(s->target) : std::string();
}

std::string unknown_key_hint(std::string_view key, const std::string& section,
                             const std::vector<std::string_view>& valid,
                             const std::map<std::string, std::string>& key_homes) {
    const Synonym* syn = find_synonym(key);
    auto suggest = [&section](const Synonym& s) {
        if (s.target.empty()) return fmt::format("; {}", s.why);
        const std::string why = s.why.empty() ? "" : fmt::format(" ({})", s.why);
        return fmt::format("; did you mean '{}'?{}", relative_to(section, s.target), why);
    };
    // A synonym in this very section beats "it belongs under ...":
    // gradient_checkpointing inside distribution means activation_checkpointing.
    if (syn && !syn->target.empty() &&
        relative_to(section, syn->target).find('.') == std::string::npos &&
        (section.empty() || syn->target.starts_with(section + ".")))
        return suggest(*syn);
    auto home = key_homes.find(std::string(key));
    if (home != key_homes.end() && home->second != section) {
        const std::string where = home->second.empty() ? "the top level" : "'" + home->second + "'";
        return fmt::format("; it belongs under {}", where);
    }
    if (syn) return suggest(*syn);
    // A guess is worth printing only when it is close: a quarter of the
    // key's letters may differ ('num_train_epoch' finds num_train_epochs,
    // 'steps' does not find 'seed').
    const std::string guess = nearest_key(key, valid);
    const int limit = std::max(1, static_cast<int>(key.size()) / 4);
    if (!guess.empty() && edit_distance(key, guess) <= limit)
        return fmt::format("; did you mean '{}'?", guess);
    if (valid.empty() || valid.size() > k_max_listed) return "";
    std::string list;
    for (auto v : valid) list += (list.empty() ? "" : ", ") + std::string(v);
    return fmt::format(" (expected one of: {})", list);
}

}  // namespace loom::config
