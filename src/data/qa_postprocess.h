// Answer extraction for extractive QA: HF run_qa's postprocess_qa_predictions
// (utils_qa.py) over Loom's features.
//
// For every feature of an example: the n_best_size highest start and end
// logits (ties: the higher token index first, as numpy's reversed argsort of
// distinct values), every (start, end) pair whose tokens are both in the
// context (offsets not {-1,-1}), with end >= start and at most
// max_answer_length tokens, scored start_logit + end_logit (in float, as
// numpy adds float32). The best of all of an example's features wins; its text
// is the context bytes [offsets[start].first, offsets[end].second).
// With version_2_with_negative the null answer (score start[0] + end[0], the
// lowest such over the features) competes: the answer is "" when
// null_score - best_non_null > null_score_diff_threshold.
// An example with no valid span gets "empty" (HF's placeholder) without v2,
// "" with it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/features.h"

namespace loom {

struct QaPostprocessOptions {
    int64_t n_best_size = 20;
    int64_t max_answer_length = 30;
    bool version_2_with_negative = false;
    double null_score_diff_threshold = 0.0;
};

struct QaPrediction {
    std::string id;            // the example's id
    std::string text;          // the answer; "" = no answer (v2)
    int64_t start_byte = -1;   // span in the context; -1 for no answer / "empty"
    int64_t end_byte = -1;
    double score = 0;          // start_logit + end_logit of the chosen span
    double null_score_diff = 0;  // v2: null_score - best non-null score
};

// Per-feature logits, indexed like FeatureSet::features. A feature whose
// vectors are empty was not evaluated and is skipped; otherwise each vector
// covers at least the feature's tokens (padding beyond them is ignored).
struct QaLogits {
    std::vector<std::vector<float>> start, end;
    explicit QaLogits(size_t n_features = 0) : start(n_features), end(n_features) {}
    // Copies rows of a batch's (B, T) start/end logits to their features.
    void store(const std::vector<int64_t>& feature_index, int64_t T, const float* start_logits,
               const float* end_logits);
};

// One prediction per example of `data` (in example order).
std::vector<QaPrediction> qa_postprocess(const FeatureSet& data, const QaLogits& logits,
                                         const QaPostprocessOptions& opts = {});

}  // namespace loom
