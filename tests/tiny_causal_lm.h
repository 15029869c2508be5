// The tiny GPT-2 the step-engine and device tests train, and its
// deterministic causal-LM micro-batches.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/model_config.h"
#include "parallel/step_engine.h"

namespace loom::test {

// The tiny GPT-2 the engine and device tests train: vocabulary 40, width
// 16, two heads, dropout 0.1 on every site.
inline ModelConfig tiny_gpt2(int n_layer = 4) {
    return parse_hf_config(
        R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 40,
            "n_embd": 16, "n_head": 2, "n_inner": 32, "n_layer": )" +
            std::to_string(n_layer) +
            R"(, "n_positions": 16, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1})",
        "tiny-gpt2");
}

// Micro-batch k for the tiny GPT-2 the engine tests train (vocabulary 40):
// deterministic in k, every position labelled; no dropout unless the caller
// keys it.
struct CausalLmBatch {
    int64_t B = 2, T = 6;
    std::vector<int64_t> ids, mask, labels;
    explicit CausalLmBatch(int k) {
        for (int64_t i = 0; i < B * T; ++i) {
            ids.push_back((i * 7 + k * 5 + 3) % 40);
            mask.push_back(1);
            labels.push_back(ids.back());
        }
    }
    MicroBatch micro() const {
        MicroBatch m;
        m.inputs.B = B;
        m.inputs.T = T;
        m.inputs.input_ids = ids.data();
        m.inputs.attention_mask = mask.data();
        m.inputs.labels = labels.data();
        m.label_count = B * (T - 1);  // causal: the last position has no target
        return m;
    }
};

}  // namespace loom::test
