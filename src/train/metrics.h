// Evaluation metrics with the reference implementations' exact semantics.
//
// - Classification: accuracy and macro precision / recall / F1 as sklearn
//   computes them with zero_division=0: the labels averaged over are the
//   sorted union of true and predicted labels, and a label that is never
//   predicted (or never true) scores 0 on the side that has no denominator.
//   Fractions in [0, 1], as HF `evaluate` reports them.
// - SQuAD: exact match and F1 after the official normalisation (lowercase,
//   drop ASCII punctuation, drop the articles a/an/the, collapse whitespace),
//   max over the gold answers, reported in percent like the official script.
//   With no gold answers (SQuAD v2.0 unanswerable) the gold is "", and when
//   either side normalises to nothing F1 is 1 if both do and 0 otherwise
//   (the v2.0 script's rule; v1.1 never has empty answers).
// - Perplexity exp(mean loss), inf when it overflows (HF run_clm).
// - Masked-token accuracy over positions whose label is not ignore_index.
//
// Counters accumulate batch by batch, and merge, so an evaluation never
// keeps every prediction in memory and data-parallel ranks can combine.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

struct ClassificationMetrics {
    double accuracy = 0.0;
    double precision = 0.0;  // macro
    double recall = 0.0;     // macro
    double f1 = 0.0;         // macro
    int64_t count = 0;
    // Per label, in the order of `labels` (sorted union of true and predicted).
    std::vector<int64_t> labels;
    std::vector<double> label_precision, label_recall, label_f1;
    std::vector<int64_t> label_support;  // true occurrences
};

class ClassificationCounter {
public:
    void add(int64_t prediction, int64_t label);
    void add(std::span<const int64_t> predictions, std::span<const int64_t> labels);
    void merge(const ClassificationCounter& other);
    ClassificationMetrics compute() const;
    int64_t count() const { return total_; }

private:
    struct Counts {
        int64_t tp = 0, fp = 0, fn = 0;
    };
    std::map<int64_t, Counts> per_label_;
    int64_t correct_ = 0, total_ = 0;
};

ClassificationMetrics classification_metrics(std::span<const int64_t> predictions,
                                             std::span<const int64_t> labels);

// The official normalize_answer, Unicode-aware where Python is (lowercasing,
// \b word boundaries, str.split() whitespace).
std::string squad_normalize(std::string_view text);
// 1.0 or 0.0, max over golds (gold "" when `golds` is empty).
double squad_exact_match(std::string_view prediction, const std::vector<std::string>& golds);
// In [0, 1], max over golds.
double squad_f1(std::string_view prediction, const std::vector<std::string>& golds);

struct SquadMetrics {
    double exact_match = 0.0;  // percent
    double f1 = 0.0;           // percent
    int64_t count = 0;
};

class SquadCounter {
public:
    void add(std::string_view prediction, const std::vector<std::string>& golds);
    void merge(const SquadCounter& other);
    SquadMetrics compute() const;

private:
    double em_sum_ = 0.0, f1_sum_ = 0.0;
    int64_t count_ = 0;
};

// exp(mean_loss); +inf when that overflows a double.
double perplexity(double mean_loss);

struct TokenAccuracy {
    int64_t correct = 0;
    int64_t total = 0;  // positions whose label is not ignore_index
    double accuracy() const { return total ? static_cast<double>(correct) / total : 0.0; }
    void merge(const TokenAccuracy& o) {
        correct += o.correct;
        total += o.total;
    }
};

// Predictions and labels are flat (B*T); positions labelled ignore_index
// (HF's -100: not masked, or padding) are not counted.
TokenAccuracy masked_token_accuracy(std::span<const int64_t> predictions,
                                    std::span<const int64_t> labels, int64_t ignore_index = -100);

// Row-wise argmax of (rows, cols) logits; the first maximum wins, as in
// torch.argmax / numpy.argmax.
std::vector<int64_t> argmax_rows(std::span<const float> logits, int64_t rows, int64_t cols);

}  // namespace loom
