// Collation: rows of features -> one padded TokenBatch (internal to the
// Loader; loader.h is the public interface).
//
// Padding goes on the right to a length T chosen by the caller (the longest
// row, rounded up to pad_to_multiple_of): input_ids get pad_id,
// attention_mask 0, token_type_ids 0, token labels -100. Labels per task:
//   sequence-classification  labels (B) = the class index (-100: unlabelled)
//   question-answering       start_positions, end_positions (B)
//   causal-lm                labels (B, T) = input_ids (the model shifts), or the
//                            feature's labels where it has them (instruction
//                            data: -100 on the prompt)
//   masked-lm                labels (B, T) = original id where masked (below)
// Masked LM follows HF DataCollatorForLanguageModeling: every token that is
// neither special nor padding is picked with mlm_probability; a picked token
// becomes mask_id (80%), a uniform random id in [0, vocab_size) (10%) or stays
// (10%). The four draws of token t of feature i in epoch e are one Philox block
// keyed (seed, epoch) at counter (i << 32 | t): the mask of a sample depends on
// nothing else (not on rank, batch composition, row or thread).
//
// label_count matches Model::forward's LossSum::count for the batch: picked
// tokens (masked LM), T_i - 1 per row (causal LM: the first token is never a
// target; with feature labels, those after the first that are not -100), labelled rows
// (classification), 2 per row (QA: start and end terms).
#pragma once

#include <cstdint>
#include <vector>

#include "data/loader.h"

namespace loom::detail {

// Draws masks for masked LM (see above).
class MlmMasker {
public:
    explicit MlmMasker(const LoaderOptions& opts);
    // Writes one row's (masked) ids and labels for its first f.ids.size()
    // positions; returns the number of picked tokens.
    int64_t mask_row(int64_t* ids, int64_t* labels, const Feature& f, int64_t feature_index,
                     int64_t epoch) const;
    // The number of tokens mask_row would pick, without writing anything.
    int64_t count_row(const Feature& f, int64_t feature_index, int64_t epoch) const;

private:
    bool eligible(int32_t id) const {
        return !(id >= 0 && size_t(id) < special_.size() && special_[size_t(id)]);
    }
    uint64_t seed_;
    uint64_t pick_threshold_;  // pick when the 32-bit draw < this (p * 2^32)
    int64_t mask_id_;
    uint64_t vocab_size_;
    std::vector<uint8_t> special_;  // (V) 1 = never masked
};

// Padded length for rows of at most `longest` tokens.
int64_t padded_length(int64_t longest, int64_t pad_to_multiple_of);

// The labels a row contributes to label_count (masked LM through `masker`).
int64_t row_label_count(Task task, const Feature& f, int64_t feature_index, int64_t epoch,
                        const MlmMasker* masker);

// Fills `out` with the rows `feature_index[0..B)` padded to T (>= each row's
// length). `masker` is required for masked LM.
void collate_rows(TokenBatch& out, const RowSource& rows, const LoaderOptions& opts,
                  const MlmMasker* masker, const int64_t* feature_index, int64_t B, int64_t T,
                  int64_t epoch);

}  // namespace loom::detail
