// plan_model_from_config (plan_model.h).
#include "train/plan_model.h"

namespace loom {

PlanModel plan_model_from_config(const ModelConfig& c) {
    PlanModel m;
    m.layers = c.num_hidden_layers;
    m.distinct_blocks = c.family == ModelFamily::albert ? c.num_hidden_groups : c.num_hidden_layers;
    m.hidden = c.hidden_size;
    m.heads = c.num_attention_heads;
    m.intermediate = c.intermediate_size;
    m.vocab = c.vocab_size;
    m.embedding = c.embedding_size > 0 ? c.embedding_size : c.hidden_size;
    m.positions = c.sinusoidal_pos_embds ? 0 : c.max_position_embeddings;
    m.type_vocab = c.type_vocab_size;
    m.lm_head = c.task == Task::masked_lm || c.task == Task::causal_lm;
    m.causal = c.task == Task::causal_lm || c.family == ModelFamily::gpt2;
    m.span_head = c.task == Task::question_answering;
    m.num_labels = c.num_labels;
    m.hidden_dropout = c.hidden_dropout > 0 || c.embedding_dropout > 0;
    m.attention_dropout = c.attention_dropout > 0;
    if (c.llama_like()) {
        // models/llama.cpp: GQA with rope, RMSNorm, the SwiGLU MLP, biases as
        // the config says, an lm_head of its own unless tied, the last-token
        // score for classification; logits at every position only for causal LM.
        m.kv_heads = c.kv_heads();
        m.gated_mlp = m.rms_norm = m.rotary = true;
        m.positions = 0;
        m.qkv_bias = c.attention_bias || c.qkv_bias;
        m.out_bias = c.attention_bias;
        m.mlp_bias = c.mlp_bias;
        m.tied_head = c.tie_word_embeddings;
        m.causal = c.task == Task::causal_lm;
        m.score_head = c.task == Task::sequence_classification || c.task == Task::base;
        if (c.task == Task::base) m.num_labels = 0;
        m.window = c.sliding_window;
    }
    plan_model_count_params(m);
    return m;
}

}  // namespace loom
