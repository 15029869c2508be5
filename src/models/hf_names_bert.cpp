// HF names of the BERT family: BERT, RoBERTa, DistilBERT, ALBERT.
#include <fmt/format.h>

#include "core/check.h"
#include "models/hf_names.h"

namespace loom {

namespace {

std::string prefixed(const std::string& base, const std::string& rest) {
    return base.empty() ? rest : base + "." + rest;
}

EncoderBlockNames bert_block(const std::string& base, int64_t i) {
    const std::string p = prefixed(base, fmt::format("encoder.layer.{}.", i));
    return {p + "attention.self.query", p + "attention.self.key", p + "attention.self.value",
            p + "attention.output.dense", p + "attention.output.LayerNorm",
            p + "intermediate.dense",     p + "output.dense",          p + "output.LayerNorm"};
}

EncoderBlockNames distilbert_block(const std::string& base, int64_t i) {
    const std::string p = prefixed(base, fmt::format("transformer.layer.{}.", i));
    return {p + "attention.q_lin", p + "attention.k_lin", p + "attention.v_lin",
            p + "attention.out_lin", p + "sa_layer_norm",  p + "ffn.lin1",
            p + "ffn.lin2",          p + "output_layer_norm"};
}

EncoderBlockNames albert_block(const std::string& base, int64_t g, int64_t j) {
    const std::string p =
        prefixed(base, fmt::format("encoder.albert_layer_groups.{}.albert_layers.{}.", g, j));
    return {p + "attention.query", p + "attention.key",       p + "attention.value",
            p + "attention.dense", p + "attention.LayerNorm", p + "ffn",
            p + "ffn_output",      p + "full_layer_layer_norm"};
}

}  // namespace

Activation config_activation(const ModelConfig& c) {
    const auto a = activation_from_hf(c.hidden_act);
    const char* key = c.family == ModelFamily::distilbert ? "activation"
                      : c.family == ModelFamily::gpt2     ? "activation_function"
                                                          : "hidden_act";
    LOOM_CHECK(a.has_value(),
               "{}: {} '{}' is not supported; supported: gelu, gelu_new, gelu_pytorch_tanh, "
               "gelu_fast, relu, tanh",
               c.source, key, c.hidden_act);
    return *a;
}

EncoderNames encoder_hf_names(const ModelConfig& c) {
    EncoderNames n;
    const bool has_head = c.task != Task::base;
    n.base = has_head ? std::string(family_name(c.family)) : "";
    const std::string emb = prefixed(n.base, "embeddings.");
    n.word = emb + "word_embeddings.weight";
    n.position = emb + "position_embeddings.weight";
    n.emb_norm = emb + "LayerNorm";
    if (c.type_vocab_size > 0 && c.family != ModelFamily::distilbert)
        n.token_type = emb + "token_type_embeddings.weight";
    switch (c.family) {
        case ModelFamily::bert:
        case ModelFamily::roberta:
            for (int64_t i = 0; i < c.num_hidden_layers; ++i) n.blocks.push_back(bert_block(n.base, i));
            break;
        case ModelFamily::distilbert:
            for (int64_t i = 0; i < c.num_hidden_layers; ++i)
                n.blocks.push_back(distilbert_block(n.base, i));
            break;
        case ModelFamily::albert:
            n.mapping_in = prefixed(n.base, "encoder.embedding_hidden_mapping_in");
            for (int64_t g = 0; g < c.num_hidden_groups; ++g)
                for (int64_t j = 0; j < c.inner_group_num; ++j)
                    n.blocks.push_back(albert_block(n.base, g, j));
            break;
        case ModelFamily::gpt2: LOOM_FAIL("{}: GPT-2 is not an encoder model", c.source);
        case ModelFamily::llama:
        case ModelFamily::mistral:
        case ModelFamily::qwen2: LOOM_FAIL("{}: {} is not an encoder model", c.source, c.model_type);
    }
    return n;
}

MlmHeadSpec encoder_mlm_head_spec(const ModelConfig& c) {
    MlmHeadSpec s;
    s.C = c.hidden_size;
    s.E = c.embedding_size;
    s.V = c.vocab_size;
    s.eps = c.layer_norm_eps;
    s.init_std = c.initializer_range;
    s.act = config_activation(c);
    switch (c.family) {
        case ModelFamily::bert:
            s.dense = "cls.predictions.transform.dense";
            s.norm = "cls.predictions.transform.LayerNorm";
            s.decoder = "cls.predictions.decoder.weight";
            s.bias = "cls.predictions.bias";
            s.bias_alias = "cls.predictions.decoder.bias";
            break;
        case ModelFamily::roberta:
            s.dense = "lm_head.dense";
            s.norm = "lm_head.layer_norm";
            s.decoder = "lm_head.decoder.weight";
            s.bias = "lm_head.bias";
            s.bias_alias = "lm_head.decoder.bias";
            s.act = Activation::gelu_erf;  // RobertaLMHead always uses erf gelu
            break;
        case ModelFamily::albert:
            s.dense = "predictions.dense";
            s.norm = "predictions.LayerNorm";
            s.decoder = "predictions.decoder.weight";
            s.bias = "predictions.bias";
            s.bias_alias = "predictions.decoder.bias";
            break;
        case ModelFamily::distilbert:
            s.dense = "vocab_transform";
            s.norm = "vocab_layer_norm";
            s.decoder = "vocab_projector.weight";
            s.bias = "vocab_projector.bias";  // its own row, not tied
            s.eps = 1e-12;
            break;
        case ModelFamily::gpt2: LOOM_FAIL("{}: GPT-2 has no masked-LM head", c.source);
        case ModelFamily::llama:
        case ModelFamily::mistral:
        case ModelFamily::qwen2: LOOM_FAIL("{}: {} has no masked-LM head", c.source, c.model_type);
    }
    return s;
}

ClsHeadSpec encoder_cls_head_spec(const ModelConfig& c, const std::string& base) {
    ClsHeadSpec s;
    s.C = c.hidden_size;
    s.num_labels = c.num_labels;
    s.init_std = c.initializer_range;
    s.p_drop_b = c.classifier_dropout;
    switch (c.family) {
        case ModelFamily::bert:
            s.dense = prefixed(base, "pooler.dense");
            s.out = "classifier";
            s.act = Activation::tanh;
            break;
        case ModelFamily::albert:
            s.dense = prefixed(base, "pooler");
            s.out = "classifier";
            s.act = Activation::tanh;
            break;
        case ModelFamily::roberta:
            s.dense = "classifier.dense";
            s.out = "classifier.out_proj";
            s.act = Activation::tanh;
            s.p_drop_a = c.classifier_dropout;
            break;
        case ModelFamily::distilbert:
            s.dense = "pre_classifier";
            s.out = "classifier";
            s.act = Activation::relu;
            break;
        case ModelFamily::gpt2: LOOM_FAIL("{}: GPT-2 sequence classification is not supported", c.source);
        case ModelFamily::llama:
        case ModelFamily::mistral:
        case ModelFamily::qwen2:
            LOOM_FAIL("{}: {} sequence classification is not supported yet", c.source,
                      c.model_type);
    }
    return s;
}

QaHeadSpec encoder_qa_head_spec(const ModelConfig& c) {
    QaHeadSpec s;
    s.out = "qa_outputs";
    s.C = c.hidden_size;
    s.init_std = c.initializer_range;
    s.p_drop = c.family == ModelFamily::distilbert ? c.qa_dropout : 0.0;
    return s;
}

}  // namespace loom
