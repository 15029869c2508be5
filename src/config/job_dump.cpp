// job_to_yaml: the resolved job as a job file (paths absolute, every default
// written out), embedded in the run report and read back by job_parse into
// an equal Job. Free strings are double-quoted so a column named "1" or
// "true" stays a string; numbers use the shortest text that reads back to
// the same double. SMP parameters are written as the Loom keys they became.
#include <yaml-cpp/yaml.h>

#include "config/job.h"
#include "core/check.h"

namespace loom {

namespace {

class Dumper {
  public:
    YAML::Emitter out;

    void key(std::string_view k) { out << YAML::Key << std::string(k) << YAML::Value; }
    void str(std::string_view k, const std::string& v) {
        key(k);
        if (v.empty())
            out << YAML::Null;
        else
            out << YAML::DoubleQuoted << v;
    }
    void num(std::string_view k, double v) {
        key(k);
        out << fmt::format("{}", v);
    }
    void integer(std::string_view k, int64_t v) {
        key(k);
        out << v;
    }
    void boolean(std::string_view k, bool v) {
        key(k);
        out << (v ? "true" : "false");
    }
    template <class E>
    void enumeration(std::string_view k, E v) {
        key(k);
        out << std::string(enum_name(v));
    }
    void begin(std::string_view k) {
        key(k);
        out << YAML::BeginMap;
    }
    void end() { out << YAML::EndMap; }
};

void dump_model(Dumper& d, const ModelArgs& m) {
    d.begin("model");
    if (!m.path.empty()) d.str("path", m.path);
    d.str("config", m.config_path);
    d.str("tokenizer", m.tokenizer_path);
    if (!m.weights_path.empty()) d.str("weights", m.weights_path);
    d.end();
}

void dump_data(Dumper& d, const DataArgs& a) {
    d.begin("data");
    d.str("train", a.train);
    d.str("eval", a.eval);
    d.str("text_column", a.text_column);
    d.str("text_pair_column", a.text_pair_column);
    d.str("label_column", a.label_column);
    d.str("prompt_column", a.prompt_column);
    d.str("completion_column", a.completion_column);
    d.key("label_map");
    if (a.label_map.empty()) {
        d.out << YAML::Null;
    } else {
        d.out << YAML::BeginMap;
        for (const auto& [k, v] : a.label_map)
            d.out << YAML::Key << YAML::DoubleQuoted << k << YAML::Value << YAML::DoubleQuoted << v;
        d.out << YAML::EndMap;
    }
    d.str("question_column", a.question_column);
    d.str("context_column", a.context_column);
    d.str("answers_column", a.answers_column);
    d.str("id_column", a.id_column);
    d.integer("max_seq_length", a.max_seq_length);
    d.integer("doc_stride", a.doc_stride);
    d.integer("max_answer_length", a.max_answer_length);
    d.num("mlm_probability", a.mlm_probability);
    d.integer("pad_to_multiple_of", a.pad_to_multiple_of);
    d.boolean("packing", a.packing);
    d.boolean("pack_boundaries", a.pack_boundaries);
    d.boolean("skip_bad_lines", a.skip_bad_lines);
    d.enumeration("sample_by", a.sample_by);
    d.end();
}

void dump_hyperparameters(Dumper& d, const TrainingArgs& t, const CheckpointArgs& c) {
    d.begin("hyperparameters");
    d.str("output_dir", t.output_dir);
    d.str("logging_dir", t.logging_dir);
    d.boolean("overwrite_output_dir", t.overwrite_output_dir);
    d.num("num_train_epochs", t.num_train_epochs);
    d.integer("max_steps", t.max_steps);
    d.integer("per_device_train_batch_size", t.per_device_train_batch_size);
    d.integer("per_device_eval_batch_size", t.per_device_eval_batch_size);
    d.integer("gradient_accumulation_steps", t.gradient_accumulation_steps);
    d.num("learning_rate", t.learning_rate);
    d.num("weight_decay", t.weight_decay);
    d.num("adam_beta1", t.adam_beta1);
    d.num("adam_beta2", t.adam_beta2);
    d.num("adam_epsilon", t.adam_epsilon);
    d.num("max_grad_norm", t.max_grad_norm);
    d.enumeration("lr_scheduler_type", t.lr_scheduler_type);
    d.begin("lr_scheduler_kwargs");
    d.num("lr_end", t.lr_end);
    d.num("power", t.power);
    if (t.num_cycles) d.num("num_cycles", *t.num_cycles);
    d.end();
    d.num("warmup_ratio", t.warmup_ratio);
    d.integer("warmup_steps", t.warmup_steps);
    d.enumeration("optim", t.optim);
    d.integer("seed", t.seed);
    d.integer("data_seed", t.data_seed);
    d.enumeration("logging_strategy", t.logging_strategy);
    d.num("logging_steps", t.logging_steps);
    d.boolean("logging_first_step", t.logging_first_step);
    d.enumeration("eval_strategy", t.eval_strategy);
    d.num("eval_steps", t.eval_steps);
    d.boolean("load_best_model_at_end", t.load_best_model_at_end);
    d.str("metric_for_best_model", t.metric_for_best_model);
    d.boolean("greater_is_better", t.greater_is_better);
    d.integer("early_stopping_patience", t.early_stopping_patience);
    d.num("early_stopping_threshold", t.early_stopping_threshold);
    d.boolean("bf16", t.bf16);
    d.boolean("fp16", t.fp16);
    d.boolean("use_cpu", t.use_cpu);
    d.boolean("dataloader_drop_last", t.dataloader_drop_last);
    d.boolean("disable_tqdm", t.disable_tqdm);
    d.enumeration("save_strategy", c.save_strategy);
    d.num("save_steps", c.save_steps);
    d.integer("save_total_limit", c.save_total_limit);
    d.str("resume_from_checkpoint", c.resume_from_checkpoint);
    d.end();
}

void dump_distribution(Dumper& d, const DistributionArgs& a) {
    d.begin("distribution");
    d.integer("data_parallel_degree", a.data_parallel_degree);
    d.integer("zero_stage", a.zero_stage);
    d.num("bucket_size_mb", a.bucket_size_mb);
    d.boolean("overlap_comm", a.overlap_comm);
    d.boolean("sparse_embedding_grads", a.sparse_embedding_grads);
    d.integer("tensor_parallel_degree", a.tensor_parallel_degree);
    d.integer("pipeline_parallel_degree", a.pipeline_parallel_degree);
    d.integer("microbatches", a.microbatches);
    d.enumeration("pipeline", a.pipeline);
    d.integer("virtual_stages", a.virtual_stages);
    d.str("placement_strategy", a.placement_strategy);
    d.boolean("activation_checkpointing", a.activation_checkpointing);
    d.integer("checkpoint_every", a.checkpoint_every);
    d.boolean("offload_activations", a.offload_activations);
    d.integer("activation_loading_horizon", a.activation_loading_horizon);
    d.key("partition");
    if (a.partition.empty()) {
        d.out << "uniform";
    } else {
        d.out << YAML::Flow << YAML::BeginSeq;
        for (int64_t n : a.partition) d.out << n;
        d.out << YAML::EndSeq;
    }
    d.num("collective_timeout_s", a.collective_timeout_s);
    // The layout that ran: `distribution: auto` has already written its
    // choice into the keys above, so the dump reruns it without re-planning.
    if (a.auto_layout)
        d.out << YAML::Comment(fmt::format("layout chosen by distribution: auto{}",
                                           a.machine.empty() ? "" : " for " + a.machine));
    if (a.smddp || a.smp) {
        d.begin("smdistributed");
        d.begin(a.smddp ? "dataparallel" : "modelparallel");
        d.boolean("enabled", true);
        d.end();
        d.end();
    }
    if (a.mpi_enabled || a.processes_per_host > 0 || !a.custom_mpi_options.empty()) {
        d.begin("mpi");
        d.boolean("enabled", a.mpi_enabled);
        d.integer("processes_per_host", a.processes_per_host);
        d.str("custom_mpi_options", a.custom_mpi_options);
        d.end();
    }
    d.end();
}

void dump_list(Dumper& d, std::string_view k, const std::vector<std::string>& v) {
    d.key(k);
    if (v.empty()) {
        d.out << YAML::Null;
        return;
    }
    d.out << YAML::Flow << YAML::BeginSeq;
    for (const std::string& s : v) d.out << YAML::DoubleQuoted << s;
    d.out << YAML::EndSeq;
}

void dump_peft(Dumper& d, const PeftArgs& p) {
    if (!p.enabled) return;
    d.begin("peft");
    d.str("peft_type", "LORA");
    d.integer("r", p.r);
    d.num("lora_alpha", p.lora_alpha);
    d.num("lora_dropout", p.lora_dropout);
    dump_list(d, "target_modules", p.target_modules);
    dump_list(d, "modules_to_save", p.modules_to_save);
    d.str("bias", "none");
    d.boolean("merge_adapters", p.merge_adapters);
    d.end();
}

}  // namespace

std::string job_to_yaml(const Job& job) {
    Dumper d;
    d.out << YAML::Comment("resolved job: every default filled in, paths absolute");
    d.out << YAML::BeginMap;
    d.enumeration("task", job.task);
    dump_model(d, job.model);
    dump_data(d, job.data);
    dump_hyperparameters(d, job.training, job.checkpoint);
    dump_distribution(d, job.distribution);
    dump_peft(d, job.peft);
    d.str("checkpoint_uri", job.checkpoint.checkpoint_uri);
    d.out << YAML::EndMap;
    LOOM_ASSERT(d.out.good(), "job_to_yaml: emitter error {}", d.out.GetLastError());
    std::string text = d.out.c_str();
    if (!job.distribution.ignored_keys.empty()) {
        text += "\n# accepted but without effect in Loom:";
        for (const auto& k : job.distribution.ignored_keys) text += " " + k;
    }
    return text + "\n";
}

}  // namespace loom
