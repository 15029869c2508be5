// The BERT family by config: BERT, RoBERTa, DistilBERT and ALBERT encoders
// (post-LN blocks) with a masked-LM, sequence-classification or QA head.
//
// Differences handled here, all read from ModelConfig:
// - RoBERTa: position ids from padding, cumsum(ids != pad) * (ids != pad) + pad,
//   and padding_idx on the position table;
// - DistilBERT: no token types, optionally frozen sinusoidal positions;
// - ALBERT: embeddings of size E projected to C by embedding_hidden_mapping_in,
//   and num_hidden_groups x inner_group_num shared layers applied
//   num_hidden_layers times.
#pragma once

#include <memory>

#include "models/model.h"

namespace loom {

std::unique_ptr<Model> build_bert_family(const ModelConfig& config,
                                         const ModelPlacement& placement);

}  // namespace loom
