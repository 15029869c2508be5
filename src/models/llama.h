// Llama (transformers 4.40 LlamaForCausalLM / LlamaModel) on the one model
// stack: token embeddings only (no position table: RoPE turns q and k inside
// attention), pre-norm blocks of RMSNorm, grouped-query causal attention
// with rotary embeddings and the SwiGLU MLP, no biases unless the config asks,
// a final RMSNorm, and the causal-LM head, untied unless tie_word_embeddings.
#pragma once

#include <memory>

#include "models/model.h"

namespace loom {

std::unique_ptr<Model> build_llama(const ModelConfig& config, const ModelPlacement& placement);

}  // namespace loom
