// ModelInputs: one micro-batch as a model reads it, the contract between the
// data loader (or a saved batch file) and the model stack. Views only: the
// arrays belong to the caller and must outlive the call.
#pragma once

#include <cstdint>

#include "core/act_ptr.h"

namespace loom {

// One micro-batch: views of int64 (B, T) / (B) arrays owned by the caller.
// Only input_ids is required; the rest are null when absent.
struct ModelInputs {
    int64_t B = 0, T = 0;
    const int64_t* input_ids = nullptr;        // (B, T)
    const int64_t* attention_mask = nullptr;   // (B, T) 1 = token, 0 = padding; null: all tokens
    const int64_t* token_type_ids = nullptr;   // (B, T) null: all zero
    // (B, T) packed documents: each token's position in its document, 0 where
    // one starts (rows 0, 1, 2, 0, 1, ...). A token attends only to its own
    // document's keys (the first is t - position_ids[t]), and position
    // embeddings read these positions. Null: one document per row, positions
    // 0 .. T-1.
    const int64_t* position_ids = nullptr;
    const int64_t* labels = nullptr;           // (B, T) token tasks or (B) classification
    const int64_t* start_positions = nullptr;  // (B) question answering
    const int64_t* end_positions = nullptr;    // (B)
    // Pipeline stages after the first (ModelPlacement::part): the previous
    // stage's output, (B, T, C) in the model's activation type and memory,
    // copied in place of the embeddings.
    CActPtr stage_input = nullptr;
};

}  // namespace loom
