// Internal to the job parser: one reader per section of the job file, and
// the cross-key validation that runs once every section is read.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <string_view>
#include <vector>

#include "config/job.h"
#include "config/yaml_reader.h"

namespace loom::config {

// `model:` a folder path, or {path, config, tokenizer, weights}.
void read_model(const YamlCtx& ctx, const YAML::Node& node, ModelArgs& out,
                bool need_tokenizer = true);
std::vector<Field> data_fields(DataArgs& d);
// `hyperparameters:` fills TrainingArgs and the save_* / resume keys of CheckpointArgs.
std::vector<Field> hyperparameter_fields(TrainingArgs& t, CheckpointArgs& c);
// The push_to_hub keys of `hyperparameters:` (hub_yaml.cpp).
std::vector<Field> hub_fields(HubArgs& h);
// save_safetensors, max_shard_size and export_dtype (hub_yaml.cpp: how the
// published folder is written).
std::vector<Field> save_fields(SaveArgs& s);
// Log lines for the hub keys: where pushes go, or that they have no effect.
std::vector<std::string> hub_notes(const YamlCtx& ctx, const Job& job);
// `peft:` (peft_yaml.cpp): LoRA's keys, PEFT's spelling and values only.
void read_peft(const YamlCtx& ctx, const YAML::Node& node, const std::string& path, PeftArgs& out);
// The LoRA job's cross-key checks (the layout it supports).
void validate_peft(const YamlCtx& ctx, const Job& job);
std::vector<std::string_view> peft_key_names();
// `distribution:` any of the accepted shapes, into one DistributionArgs.
// SMP's fp16/bf16 parameters turn on the training flags of the same name.
void read_distribution(const YamlCtx& ctx, const YAML::Node& node, DistributionArgs& out,
                       TrainingArgs& training);
// Loom's own distribution keys and the SageMaker blocks, for key homes.
std::vector<std::string_view> distribution_key_names();
// Names of every key of every section, for "it belongs under ..." hints.
void register_key_homes(YamlCtx& ctx);

// Hugging Face and SageMaker names for Loom's keys (job_compat.cpp).
// hyperparameters.report_to: validates the value (a name or a list).
void read_report_to(const YamlCtx& ctx, const YAML::Node& node, const std::string& path);
// checkpoint_s3_uri -> checkpoint_uri, after the top level is read.
void apply_top_level_synonyms(const YamlCtx& ctx, Job& job);
// hyperparameters.gradient_checkpointing -> distribution.activation_checkpointing:
// applied before the distribution block is read, checked against it after.
void apply_gradient_checkpointing(const YamlCtx& ctx, DistributionArgs& d);
void check_gradient_checkpointing(const YamlCtx& ctx, const DistributionArgs& d);
// do_train / do_eval, before the cross-key checks (do_eval: false drops data.eval).
void apply_hf_switches(const YamlCtx& ctx, Job& job, const JobParseOptions& options);

// Notes for keys that were accepted but change nothing in this job, and the
// run's precision (job_notes.cpp); appended to ctx.notes after validation.
void add_job_notes(const YamlCtx& ctx, const Job& job);

// Fills defaults that depend on other keys and rejects inconsistent jobs;
// errors point at the key to change.
void resolve_and_validate(const YamlCtx& ctx, Job& job, const JobParseOptions& options);

}  // namespace loom::config
