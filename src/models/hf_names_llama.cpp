// HF names of the Llama family (LlamaForCausalLM / LlamaModel).
#include <fmt/format.h>

#include "models/hf_names.h"

namespace loom {

LlamaNames llama_hf_names(const ModelConfig& c) {
    LlamaNames n;
    n.base = c.task == Task::base ? "" : "model";
    const std::string p = n.base.empty() ? "" : n.base + ".";
    n.embed = p + "embed_tokens.weight";
    n.norm = p + "norm";
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
        const std::string l = p + fmt::format("layers.{}.", i);
        n.blocks.push_back({l + "input_layernorm", l + "self_attn.q_proj", l + "self_attn.k_proj",
                            l + "self_attn.v_proj", l + "self_attn.o_proj",
                            l + "post_attention_layernorm", l + "mlp.gate_proj", l + "mlp.up_proj",
                            l + "mlp.down_proj"});
    }
    n.lm_head = "lm_head.weight";
    return n;
}

}  // namespace loom
