// GPT-2: pre-LN blocks with causal attention, Conv1D ([in, out]) weights, a
// final ln_f, and the causal-LM head tied to wte. Position ids are 0..T-1
// whatever the padding; the attention mask is causal plus padding.
#pragma once

#include <memory>

#include "models/model.h"

namespace loom {

std::unique_ptr<Model> build_gpt2(const ModelConfig& config, const ModelPlacement& placement);

}  // namespace loom
