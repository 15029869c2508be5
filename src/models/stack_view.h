// StackView: a read-only description of a StackModel's modules, for code
// that walks them without knowing the family (which rows a pipeline stage
// keeps, tests that check every module): sizes, layouts, dropout sites and
// parameter rows, as the modules hold them.
//
// Pointers are views into the model that produced the StackView and live as
// long as it does. What the view deliberately does not carry: buffers and
// activations.
#pragma once

#include <cstdint>
#include <vector>

#include "core/task.h"
#include "nn/embedding.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/transformer_block.h"
#include "ops/activation.h"

namespace loom {

// How position ids are formed from the input ids.
enum class PositionIds {
    sequential,    // 0, 1, ..., T-1 (BERT, ALBERT, DistilBERT, GPT-2)
    from_padding,  // RoBERTa: cumsum(ids != pad) * (ids != pad) + pad
};

// h0 = [mapping]( dropout( [norm]( word[ids] + [token_type[types]] + position[pos] ) ) )
// (HF order of the sum: word, then token type, then position.)
struct EmbeddingsView {
    const Embedding* word = nullptr;        // (V, E)
    const Embedding* position = nullptr;    // (P, E)
    const Embedding* token_type = nullptr;  // (types, E) or null: no token types
    PositionIds positions = PositionIds::sequential;
    int64_t pad_token_id = -1;              // from_padding only
    const LayerNorm* norm = nullptr;        // (E) or null (GPT-2)
    const Linear* mapping = nullptr;        // ALBERT E -> C, or null
    double dropout = 0;                     // DropoutPlan site `embeddings`, layer 0
    int64_t E = 0;                          // embedding width (C unless ALBERT)
};

// What each head kind uses (models/heads/head.h has the math):
//   masked_lm:   dense (C -> E), act, norm (E), decoder (V, E) + bias
//   sequence_classification: token 0 -> [drop a] -> dense (C -> C) -> act
//                -> drop b -> decoder (C -> num_labels)
//   question_answering: [drop a] -> decoder (C -> 2): start, end logits
//   causal_lm:   decoder (V, C), no bias; position t predicts label t + 1
struct HeadView {
    Task kind = Task::base;
    const Linear* dense = nullptr;
    const LayerNorm* norm = nullptr;
    const Linear* decoder = nullptr;
    Activation act = Activation::gelu_erf;
    double p_drop_a = 0, p_drop_b = 0;  // DropoutPlan sites head_a / head_b, layer 0
    int64_t n_out = 0;                  // decoder outputs: V, num_labels or 2
};

struct StackView {
    const std::vector<TransformerBlock>* blocks = nullptr;  // distinct parameter sets
    const std::vector<int>* schedule = nullptr;             // layer application -> block
    int64_t apps_per_layer = 1;                             // applications per hidden state
    const LayerNorm* final_norm = nullptr;                  // GPT-2 ln_f, or null
    EmbeddingsView embeddings;
    HeadView head;
};

}  // namespace loom
