// Features: tokenized examples, one model input row each, before padding.
//
// The trainer turns Records (data/record.h) into Features with the task's
// featurizer (featurize_*), then a Loader batches, pads and (for masked LM)
// masks them. QA features keep what answer extraction needs: which example
// they came from and each token's span in the context.
//
// What each task makes (the Hugging Face example scripts' preprocessing):
//   sequence-classification  run_glue: text (+ text_pair) with special tokens,
//                            LongestFirst truncation to max_seq_length; label
//                            -> index (label_names, or the integer itself).
//   masked-lm                run_mlm: each non-blank text with special tokens,
//                            truncated (line_by_line), or with `packing` all
//                            texts concatenated and cut into max_seq_length
//                            blocks (group_texts; the tail is dropped).
//                            Masks are drawn per epoch by the Loader.
//   causal-lm                run_clm: texts without truncation, concatenated
//                            and cut into blocks (`packing`, the default in the
//                            job), or one truncated row per non-empty text.
//                            Instruction records (prompt, completion) as TRL's
//                            SFT: tokens of prompt + completion with the
//                            tokenizer's special tokens, then eos_id; labels
//                            -100 on the prompt's tokens (featurize_lm.cpp).
//   question-answering       run_qa prepare_train_features: (question, context)
//                            windows, only_second truncation with doc_stride
//                            overlap; answer start/end token or (0, 0).
// NOTE: group_texts here concatenates the whole data set, where HF's
// datasets.map concatenates chunks of 1000 records (so HF drops up to one tail
// per chunk, Loom only the final one).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/task.h"
#include "data/record.h"

namespace loom {

namespace tokenizer {
class Tokenizer;
}
using tokenizer::Tokenizer;

struct Feature {
    std::vector<int32_t> ids;       // (T_i) token ids, special tokens included, no padding
    std::vector<int32_t> type_ids;  // (T_i) segment ids
    // (T_i) causal LM: the token's label, -100 where it is no target (an
    // instruction's prompt); empty: every token is its own label.
    std::vector<int32_t> labels;
    // (T_i) causal LM packed with document boundaries: each token's position
    // in its document (0 starts a document); empty: 0 .. T_i - 1.
    std::vector<int32_t> position_ids;
    int64_t label = -100;        // sequence classification: class index
    int64_t start_position = 0;  // QA: token index of the answer start (0 = CLS when absent)
    int64_t end_position = 0;
    // QA post-processing.
    int64_t example_index = -1;                       // index into FeatureSet::examples
    std::vector<std::pair<int32_t, int32_t>> offsets; // (T_i) byte span in the context; {-1,-1} outside it
};

struct FeatureStats {
    int64_t records = 0;
    int64_t truncated = 0;  // records longer than max_seq_length (cut, and counted)
    int64_t tokens = 0;     // real tokens over all features
    int64_t skipped = 0;    // records that made no feature (blank LM text)
    int64_t dropped_tokens = 0;  // packing: the tail shorter than one block
    // Instruction data: tokens that straddle the prompt/completion boundary
    // (counted as prompt, so not trained on).
    int64_t boundary_tokens = 0;
};

struct FeatureSet {
    Task task = Task::masked_lm;
    std::vector<Feature> features;
    std::vector<Record> examples;  // QA only: the records, for answer extraction and metrics
    std::vector<std::string> label_names;  // classification: index -> name
    FeatureStats stats;
};

struct FeaturizeOptions {
    Task task = Task::masked_lm;
    int64_t max_seq_length = 128;
    int64_t doc_stride = 128;
    bool packing = false;  // LM: concatenate and cut into blocks (group_texts)
    // Causal LM with packing: keep document boundaries in each block
    // (Feature::position_ids restart per document, each document's first
    // token is no target); the job key data.pack_boundaries. The loader
    // hands the positions on (ModelInputs::position_ids), and the models keep
    // attention within each document.
    bool pack_documents = false;
    std::vector<std::string>
        label_names;  // classification: fixed label order (from config id2label)
    // Causal LM instruction data (records of RecordKind::prompt_completion,
    // `has_pair` set): the end-of-sequence id appended after the completion
    // (config.json's eos_token_id); required for such records.
    int64_t eos_id = -1;
    // The reader's files (RecordReader::files()), so errors name "file:line";
    // empty: errors name the record's file index and line.
    std::vector<std::string> files;
    int n_threads = 0;  // <= 0: all cores (OpenMP default)
};

// Tokenizes records on all cores. Classification labels are mapped through
// label_names (an unknown label is an error naming the record's origin); with
// no label_names, text labels get the sorted set of names found (run_glue's
// label_list) and integer labels are used as they are. The result's
// label_names is the order used.
FeatureSet featurize(const std::vector<Record>& records, const Tokenizer& tok,
                     const FeaturizeOptions& opts);

}  // namespace loom
