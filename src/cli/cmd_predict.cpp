// `loom predict --model DIR --input FILE`: runs a trained model folder over
// input records and writes one JSON line per record (train/predict.h).
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/hub_model.h"
#include "core/check.h"
#include "core/runtime.h"
#include "train/predict.h"

namespace loom::cli {

namespace {

struct PredictCliOptions {
    std::string model_dir, revision, input, output;
    int threads = 0;
    PredictOptions p;
};

void run_predict(const PredictCliOptions& o) {
    if (o.threads > 0) runtime_init({o.threads});
    runtime_pin_threads();
    Predictor predictor(model_folder_or_hub(o.model_dir, o.revision), o.p);
    const auto results = predictor.predict_file(o.input);
    // stderr, so that stdout stays one JSON line per record.
    for (const std::string& note : predictor.notes()) fmt::print(stderr, "predict: {}\n", note);
    std::ofstream file;
    if (!o.output.empty()) {
        file.open(o.output, std::ios::binary);
        LOOM_CHECK(file.good(), "--output: cannot write '{}'", o.output);
    }
    std::ostream& out = o.output.empty() ? std::cout : file;
    for (const auto& r : results) out << r.dump() << '\n';
    LOOM_CHECK(out.good(), "--output: writing '{}' failed", o.output.empty() ? "stdout" : o.output);
    if (!o.output.empty())
        fmt::print(stderr, "{} predictions ({}) written to {}\n", results.size(),
                   predictor.config().architecture, o.output);
}

void setup_predict(CLI::App& app) {
    auto o = std::make_shared<PredictCliOptions>();
    CLI::App* sub = app.add_subcommand("predict", "Run a trained model folder over input records");
    sub->footer(R"(
The model folder is what `loom train` writes (config.json, model.safetensors,
tokenizer.json); its architecture decides the task. Inputs are read like
training data: JSONL, CSV/TSV (header row), plain text (one input a line, for
the text tasks) or SQuAD JSON. One JSON line per record on stdout (or
--output); notes (lengths used, inputs truncated) go to stderr.

  sequence classification   input: {"text": "a fine film"}
                            pairs: {"text": ..., "text_pair": ...} with
                            --text-pair-column text_pair
                            output: {"label": "positive", "score": 0.93, "scores": {...}}
  question answering        input: {"question": "Where is Paris?",
                                    "context": "Paris is in France."}
                            ("id" is copied to the output; "answers" is not
                            needed and is ignored; CSV: question,context columns)
                            output: {"answer": "France", "start": 12, "end": 18,
                                     "score": 11.2}: the best span of the
                            context; start/end are code-point offsets in it
  masked LM                 input: {"text": "The capital of France is [MASK]."}
                            ([MASK] or <mask>, as the tokenizer spells it)
                            output: {"masks": [[{"token", "id", "score"}, ...]],
                                     "filled": ...}, --top-k choices per mask
  causal LM                 input: {"text": "Once upon a time"}
                            output: {"continuation": ..., "text": ...}; greedy,
                            or --sample with --top-k, --temperature and --seed

Lengths come from the model's config.json unless given. Usable positions are
max_position_embeddings (GPT-2: n_positions); RoBERTa numbers positions from
pad_token_id + 1, so 514 rows hold 512 tokens.
  --max-seq-length  QA: min(384, positions), as HF's QA pipeline;
                    causal LM: positions; otherwise min(512, positions).
                    Longer inputs are truncated (classification, masked LM),
                    read in overlapping windows (QA) or keep their last
                    tokens as the context (causal LM); stderr says how many.
  --doc-stride      QA window overlap: min(128, max_seq_length / 3), HF's 128
                    at 384; must be less than max_seq_length.
A value beyond these limits is an error naming the flag and the limit.

  loom predict --model out --input reviews.jsonl --output predictions.jsonl
  loom predict --model qa-out --input questions.jsonl
  loom predict --model gpt2-out --input prompts.jsonl --max-new-tokens 40 --sample --top-k 20
)");
    sub->add_option("--model", o->model_dir,
                    "model folder (config.json, model.safetensors, tokenizer.json) or Hub id")
        ->required();
    sub->add_option("--revision", o->revision, "branch, tag or commit of a Hub model id");
    sub->add_option("--input", o->input, "input records (JSONL, CSV/TSV, text, SQuAD JSON)")
        ->required();
    sub->add_option("--output", o->output, "write JSON lines here (default: stdout)");
    sub->add_option("--text-column", o->p.columns.text_column, "text column")
        ->capture_default_str();
    sub->add_option("--text-pair-column", o->p.columns.text_pair_column,
                    "second text column (classification of pairs)");
    sub->add_option("--question-column", o->p.columns.question_column)->capture_default_str();
    sub->add_option("--context-column", o->p.columns.context_column)->capture_default_str();
    sub->add_option_function<int64_t>(
        "--max-seq-length", [o](const int64_t& v) { o->p.max_seq_length = v; },
        "tokens per row (default: from the model, see below)");
    sub->add_option_function<int64_t>(
        "--doc-stride", [o](const int64_t& v) { o->p.doc_stride = v; },
        "QA window overlap in tokens (default: min(128, max_seq_length / 3))");
    sub->add_option("--max-answer-length", o->p.max_answer_length, "QA: longest answer in tokens")
        ->capture_default_str();
    sub->add_option("--top-k", o->p.top_k, "masked LM: choices per mask; causal LM: sampling pool")
        ->capture_default_str();
    sub->add_option("--max-new-tokens", o->p.max_new_tokens, "causal LM: tokens to generate")
        ->capture_default_str();
    sub->add_flag("--sample", o->p.sample, "causal LM: sample from the top-k instead of greedy");
    sub->add_option("--temperature", o->p.temperature, "causal LM sampling temperature")
        ->capture_default_str();
    sub->add_option("--seed", o->p.seed, "causal LM sampling seed")->capture_default_str();
    sub->add_option("--threads", o->threads, "CPU threads (default: all cores or OMP_NUM_THREADS)");
    sub->callback([o] { run_predict(*o); });
}

}  // namespace

LOOM_COMMAND(setup_predict);

}  // namespace loom::cli
