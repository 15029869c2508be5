// What PEFT 0.10's save_pretrained writes for a LoRA adapter, and the merged
// model merge_and_unload() gives:
//   adapter_model.safetensors  "base_model.model.<HF module>.lora_A.weight" (r, in) and
//                              ".lora_B.weight" (out, r); modules_to_save rows under
//                              "base_model.model.<HF name>"
//   adapter_config.json        LoraConfig's fields, sorted, indent 2 (target_modules sorted)
// The merge is W + (B @ A) * scaling in fp32, in that order (PEFT's
// get_delta_weight), transposed for GPT-2's Conv1D (in, out) weights.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/task.h"
#include "core/tensor.h"
#include "models/model_config.h"
#include "nn/param_table.h"

namespace loom {

// adapter_config.json's text for `spec` (its targets written sorted).
std::string adapter_config_json(const LoraSpec& spec, Task task,
                                const std::string& base_model_name_or_path);

// The adapter's tensors (host copies' views) under PEFT's file keys.
std::map<std::string, Tensor> adapter_tensors(const ParamTable& table);

// Every base row (adapters left out), targeted weights merged (new tensors).
// `conv1d`: the blocks' weights are stored (in, out) (GPT-2).
std::map<std::string, Tensor> merged_tensors(const ParamTable& table, const LoraSpec& spec,
                                             bool conv1d);

// Writes adapter_model.safetensors and adapter_config.json into `dir`.
void export_peft_adapter(const std::string& dir, const ParamTable& table, const LoraSpec& spec,
                         Task task, const std::string& base_model_name_or_path);

// PEFT's default target_modules for a family (its
// TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
std::vector<std::string> peft_default_targets(ModelFamily family);

}  // namespace loom
