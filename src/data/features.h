// Features: tokenized examples, one model input row each, before padding.
//
// The trainer turns Records (data/record.h) into Features with the task's
// featurizer (featurize_*), then a Loader batches, pads and (for masked LM)
// masks them. QA features keep what answer extraction needs: which example
// they came from and each token's span in the context.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/job.h"
#include "data/record.h"

namespace loom {

class Tokenizer;

struct Feature {
    std::vector<int32_t> ids;       // (T_i) token ids, special tokens included, no padding
    std::vector<int32_t> type_ids;  // (T_i) segment ids
    int64_t label = -100;           // sequence classification: class index
    int64_t start_position = 0;     // QA: token index of the answer start (0 = CLS when absent)
    int64_t end_position = 0;
    // QA post-processing.
    int64_t example_index = -1;                       // index into FeatureSet::examples
    std::vector<std::pair<int32_t, int32_t>> offsets; // (T_i) byte span in the context; {-1,-1} outside it
};

struct FeatureStats {
    int64_t records = 0;
    int64_t truncated = 0;  // records longer than max_seq_length (cut, and counted)
    int64_t tokens = 0;     // real tokens over all features
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
    bool packing = false;                   // causal LM: concatenate and cut into blocks
    std::vector<std::string> label_names;   // classification: fixed label order (from config id2label)
};

// Tokenizes records on all cores. Classification labels are mapped through
// label_names (an unknown label is an error naming the record's origin).
FeatureSet featurize(const std::vector<Record>& records, const Tokenizer& tok,
                     const FeaturizeOptions& opts);

}  // namespace loom
