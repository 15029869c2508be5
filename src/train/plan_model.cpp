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
    plan_model_count_params(m);
    return m;
}

}  // namespace loom
