// pipeline_stage_extras (stage_extras.h): FLOPs per token of a layer, the
// embeddings mapping and the task head, from the config.
#include "models/stage_extras.h"

namespace loom {

StageExtras pipeline_stage_extras(const ModelConfig& c, int64_t seq_len, double mlm_probability) {
    const double C = double(c.hidden_size), I = double(c.intermediate_size);
    const double E = double(c.embedding_size > 0 ? c.embedding_size : c.hidden_size);
    const double V = double(c.vocab_size), T = double(seq_len);
    // Forward FLOPs per token (backward is twice that on every side, so the
    // ratio holds): the block's linears plus attention's two T-long products.
    const double layer = 2 * (4 * C * C + 2 * C * I) + 4 * T * C;
    StageExtras x;
    if (E != C) x.first = 2 * E * C / layer;  // ALBERT's mapping
    switch (c.task) {
        case Task::masked_lm:
            x.last = mlm_probability * 2 * (C * E + E * V) / layer;
            break;
        case Task::causal_lm:
            x.last = 2 * C * V / layer;
            break;
        default:
            break;  // classification and QA heads: a few C-wide rows
    }
    return x;
}

}  // namespace loom
