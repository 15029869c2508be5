// The Llama family's config.json keys (LlamaConfig, MistralConfig and
// Qwen2Config, transformers 4.40), read
// into ModelConfig and written back for export. Used by model_config.cpp
// only; kept apart so that file stays one reader per encoder family.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "models/model_config.h"

namespace loom {

// Sizes, GQA, RoPE (theta, linear scaling), RMSNorm eps, biases, dropout;
// errors name config.json and the key.
void parse_llama_config(const nlohmann::json& j, ModelConfig& c);
void llama_config_to_json(const ModelConfig& c, nlohmann::json& j);

}  // namespace loom
