// Internal to the job parser: one reader per section of the job file, and
// the cross-key validation that runs once every section is read.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "config/job.h"
#include "config/yaml_reader.h"

namespace loom::config {

// `model:` a folder path, or {path, config, tokenizer, weights}.
void read_model(const YamlCtx& ctx, const YAML::Node& node, ModelArgs& out);
std::vector<Field> data_fields(DataArgs& d);
// `hyperparameters:` fills TrainingArgs and the save_* / resume keys of CheckpointArgs.
std::vector<Field> hyperparameter_fields(TrainingArgs& t, CheckpointArgs& c);
// `distribution:` any of the accepted shapes, into one DistributionArgs.
// SMP's fp16/bf16 parameters turn on the training flags of the same name.
void read_distribution(const YamlCtx& ctx, const YAML::Node& node, DistributionArgs& out,
                       TrainingArgs& training);
// Names of every key of every section, for "it belongs under ..." hints.
void register_key_homes(YamlCtx& ctx);

// Fills defaults that depend on other keys and rejects inconsistent jobs;
// errors point at the key to change.
void resolve_and_validate(const YamlCtx& ctx, Job& job, const JobParseOptions& options);

}  // namespace loom::config
