// Hugging Face parameter names per family, as templates filled with layer
// indices: the one place that knows "bert.encoder.layer.{i}.attention.self.query"
// versus "distilbert.transformer.layer.{i}.attention.q_lin". Models register
// their ParamTable rows under these names, so checkpoints load and save by
// name with no translation table at run time.
//
// `base` is the base-model prefix ("bert", "transformer"); a model without a
// task head uses HF's base-model names, which have no prefix.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/heads/head.h"
#include "models/model_config.h"

namespace loom {

// Row prefixes of one encoder layer (".weight"/".bias" are appended).
struct EncoderBlockNames {
    std::string query, key, value;  // fused into one (3C, C) linear
    std::string attn_out, attn_norm;
    std::string ffn_in, ffn_out, out_norm;
};

struct EncoderNames {
    std::string base;                                 // "bert", "" for a base model
    std::string word, position, token_type;           // full tensor names
    std::string emb_norm;                             // row prefix
    std::string mapping_in;                           // ALBERT only, row prefix
    std::vector<EncoderBlockNames> blocks;            // distinct parameter sets
};

// BERT, RoBERTa, DistilBERT, ALBERT. ALBERT's blocks are ordered
// group-major: block g * inner_group_num + j.
EncoderNames encoder_hf_names(const ModelConfig& c);

// Head specs with names and sizes filled from the config; the caller sets
// the tied word-embedding row.
MlmHeadSpec encoder_mlm_head_spec(const ModelConfig& c);
ClsHeadSpec encoder_cls_head_spec(const ModelConfig& c, const std::string& base);
QaHeadSpec encoder_qa_head_spec(const ModelConfig& c);

struct Gpt2BlockNames {
    std::string ln_1, c_attn, c_proj, ln_2, c_fc, mlp_proj;
};
struct Gpt2Names {
    std::string base;      // "transformer", "" for GPT2Model
    std::string wte, wpe;  // full tensor names
    std::string ln_f;      // row prefix
    std::vector<Gpt2BlockNames> blocks;
    std::string lm_head;   // "lm_head.weight"
};
Gpt2Names gpt2_hf_names(const ModelConfig& c);

struct LlamaBlockNames {
    std::string input_norm, q, k, v, o, post_norm, gate, up, down;  // row prefixes
};
struct LlamaNames {
    std::string base;          // "model", "" for LlamaModel
    std::string embed;         // full tensor name
    std::string norm;          // row prefix of the final RMSNorm
    std::vector<LlamaBlockNames> blocks;
    std::string lm_head;       // "lm_head.weight"
};
LlamaNames llama_hf_names(const ModelConfig& c);

// hidden_act (or the family's key) -> Activation; errors name config.json.
Activation config_activation(const ModelConfig& c);

}  // namespace loom
