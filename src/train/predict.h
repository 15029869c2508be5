// Predictor: what `loom predict` does with a trained model folder, one JSON
// object per input record, by the model's task (from config.json):
//   sequence classification  {"label", "score", "scores": {label: probability}}
//   question answering       {"answer", "start", "end" (code points in the
//                            context), "score"}: n-best search over doc-stride
//                            windows, as evaluation does
//   masked LM                {"masks": [[{"token", "id", "score"} x top_k] per
//                            mask token], "filled": the text with the top choices}
//   causal LM                {"continuation", "text"}: greedy, or top-k sampling
//                            with a seed
// Inputs are records as the trainer reads them (JSONL, CSV, text, SQuAD):
// `text` (+ `text_pair`), `question` and `context` (answers are not needed),
// or a prompt in `text`.
//
// Lengths come from the model unless given (predict_lengths): inputs longer
// than max_seq_length are truncated as HF's pipelines do, and counted in
// notes(); QA contexts are read in overlapping windows instead.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/record.h"
#include "models/model_config.h"

namespace loom {

class Model;
namespace tokenizer {
class Tokenizer;
}

// The fields mirror `loom predict`'s flags, and errors about them name the
// flag.
struct PredictOptions {
    std::optional<int64_t> max_seq_length;  // unset: from the model (predict_lengths)
    std::optional<int64_t> doc_stride;      // QA window overlap; unset: from max_seq_length
    int64_t max_answer_length = 30;
    int64_t top_k = 5;            // masked LM choices; causal LM sampling pool
    int64_t max_new_tokens = 20;  // causal LM
    bool sample = false;          // causal LM: top-k sampling instead of greedy
    double temperature = 1.0;
    uint64_t seed = 0;
    ReadOptions columns;  // input column names (kind is set from the task)
};

// The lengths a prediction runs with, and where each came from ("the model's
// 64 positions (...)", "--max-seq-length"), for the log.
struct PredictLengths {
    int64_t max_seq_length = 0;
    int64_t doc_stride = 0;  // QA only
    std::string max_seq_length_from, doc_stride_from;
};

// Defaults follow HF's pipelines, bounded by what the model accepts
// (ModelConfig::max_positions()): max_seq_length min(384, positions) for QA,
// the positions for causal LM, min(512, positions) otherwise; doc_stride
// min(128, max_seq_length / 3), HF's 128 at 384 scaled down for small models.
// A given value outside those bounds is an error naming the flag, the value
// and the limit.
PredictLengths predict_lengths(const ModelConfig& config, const PredictOptions& options);

class Predictor {
  public:
    // Loads DIR/config.json, DIR/model.safetensors and DIR/tokenizer.json.
    Predictor(const std::string& model_dir, PredictOptions options = {});
    ~Predictor();
    Predictor(const Predictor&) = delete;
    Predictor& operator=(const Predictor&) = delete;

    const ModelConfig& config() const { return config_; }
    const PredictLengths& lengths() const { return lengths_; }
    // What a person should know about the inputs so far, one line each: the
    // lengths used, and how many inputs were truncated (or, for QA, split
    // into windows).
    std::vector<std::string> notes() const;
    int64_t truncated() const { return truncated_; }
    // One result per record of the file, in order.
    std::vector<nlohmann::json> predict_file(const std::string& path);
    std::vector<nlohmann::json> predict(const std::vector<Record>& records);

  private:
    std::vector<nlohmann::json> classify(const std::vector<Record>& records);
    std::vector<nlohmann::json> answer(const std::vector<Record>& records);
    nlohmann::json fill_masks(const Record& r);
    nlohmann::json continue_text(const Record& r);
    // Runs one row without labels; returns the model's named outputs.
    void run(const std::vector<int64_t>& ids, const std::vector<int64_t>& types);

    ModelConfig config_;
    PredictOptions opts_;
    PredictLengths lengths_;
    int64_t inputs_ = 0;
    int64_t truncated_ = 0;  // inputs cut to max_seq_length (QA: split into windows)
    std::unique_ptr<tokenizer::Tokenizer> tok_;
    std::unique_ptr<Model> model_;
};

}  // namespace loom
