// HF names of GPT-2 (GPT2LMHeadModel / GPT2Model).
#include <fmt/format.h>

#include "models/hf_names.h"

namespace loom {

Gpt2Names gpt2_hf_names(const ModelConfig& c) {
    Gpt2Names n;
    n.base = c.task == Task::base ? "" : "transformer";
    const std::string p = n.base.empty() ? "" : n.base + ".";
    n.wte = p + "wte.weight";
    n.wpe = p + "wpe.weight";
    n.ln_f = p + "ln_f";
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
        const std::string h = p + fmt::format("h.{}.", i);
        n.blocks.push_back({h + "ln_1", h + "attn.c_attn", h + "attn.c_proj", h + "ln_2",
                            h + "mlp.c_fc", h + "mlp.c_proj"});
    }
    n.lm_head = "lm_head.weight";
    return n;
}

}  // namespace loom
