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
// `text` (+ `text_pair`), `question` and `context`, or a prompt in `text`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/record.h"
#include "io/hf_config.h"

namespace loom {

class Model;
namespace tokenizer {
class Tokenizer;
}

struct PredictOptions {
    int64_t max_seq_length = 0;  // 0: min(512, the model's position table)
    int64_t doc_stride = 128;    // QA windows
    int64_t max_answer_length = 30;
    int64_t top_k = 5;            // masked LM choices; causal LM sampling pool
    int64_t max_new_tokens = 20;  // causal LM
    bool sample = false;          // causal LM: top-k sampling instead of greedy
    double temperature = 1.0;
    uint64_t seed = 0;
    ReadOptions columns;  // input column names (kind is set from the task)
};

class Predictor {
  public:
    // Loads DIR/config.json, DIR/model.safetensors and DIR/tokenizer.json.
    Predictor(const std::string& model_dir, PredictOptions options = {});
    ~Predictor();
    Predictor(const Predictor&) = delete;
    Predictor& operator=(const Predictor&) = delete;

    const ModelConfig& config() const { return config_; }
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
    std::unique_ptr<tokenizer::Tokenizer> tok_;
    std::unique_ptr<Model> model_;
};

}  // namespace loom
