// Llama (transformers 4.40 LlamaForCausalLM / LlamaModel) on the one model
// stack: token embeddings only (no position table: RoPE turns q and k inside
// attention), pre-norm blocks of RMSNorm, grouped-query causal attention
// with rotary embeddings and the SwiGLU MLP, no biases unless the config asks,
// a final RMSNorm, and the causal-LM head, untied unless tie_word_embeddings.
// The same builder makes Mistral (a sliding attention window) and Qwen2
// (q/k/v biases; tied embeddings where its config says so): the three differ
// only in what their configs set (models/model_config_llama.cpp).
#pragma once

#include <memory>

#include "models/model.h"

namespace loom {

std::unique_ptr<Model> build_llama(const ModelConfig& config, const ModelPlacement& placement);

}  // namespace loom
