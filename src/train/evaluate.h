// Evaluation of a Model on a FeatureSet, with each task's metrics:
//   sequence-classification  loss, accuracy, f1, precision, recall (macro, sklearn)
//   question-answering       loss, exact_match, f1 (official SQuAD, answers from
//                            start/end logits over the doc-stride windows, n-best)
//   masked-lm / causal-lm    loss, perplexity, accuracy (masked / next-token)
// Metric names carry no "eval_" prefix; the trainer adds it (HF log names).
//
// Batches come from a Loader without shuffling, so masked-LM masks (keyed by
// data_seed, epoch 0, sample) are the same at every evaluation and the
// numbers are comparable across steps. Dropout is off. The loss is the sum
// over the whole set divided by its label count (not a mean of batch means).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/job.h"
#include "data/features.h"
#include "data/loader.h"
#include "data/qa_postprocess.h"
#include "models/model.h"

namespace loom {

struct EvalOptions {
    Task task = Task::sequence_classification;
    QaPostprocessOptions qa;
    // Keep per-feature outputs (classification logits, QA predictions) for
    // predict and tests.
    bool keep_outputs = false;
};

struct EvalOutput {
    std::vector<std::pair<std::string, double>> metrics;  // "loss", "accuracy", ...
    double runtime_s = 0;
    int64_t samples = 0;
    // keep_outputs: classification logits (N, num_labels) in feature order;
    // QA predictions per example.
    std::vector<float> logits;
    int64_t num_labels = 0;
    std::vector<QaPrediction> qa_predictions;

    double metric(const std::string& name) const;  // NaN when absent
};

EvalOutput evaluate_model(Model& model, std::shared_ptr<const FeatureSet> data,
                          const LoaderOptions& loader_options, const EvalOptions& options);

}  // namespace loom
