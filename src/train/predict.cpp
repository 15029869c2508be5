// Predictor: per-task inference for `loom predict` (see predict.h).
#include "train/predict.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/check.h"
#include "core/philox.h"
#include "data/features.h"
#include "data/qa_postprocess.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace loom {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

Task task_of(const ModelConfig& c) {
    if (c.task == Task::base)
        LOOM_FAIL("{}: architecture {} has no task head to predict with", c.source, c.architecture);
    return c.task;
}

// Softmax of one row in double (probabilities a person reads).
std::vector<double> softmax(const float* x, int64_t n, double temperature = 1.0) {
    std::vector<double> p(static_cast<size_t>(n));
    const double mx = double(*std::max_element(x, x + n));
    double sum = 0;
    for (int64_t i = 0; i < n; ++i)
        sum += p[size_t(i)] = std::exp((double(x[i]) - mx) / temperature);
    for (double& v : p) v /= sum;
    return p;
}

// Indices of the k largest values, largest first (ties: lower index first).
std::vector<int64_t> top_k(const std::vector<double>& p, int64_t k) {
    std::vector<int64_t> idx(p.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = int64_t(i);
    k = std::min<int64_t>(k, int64_t(idx.size()));
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) {
        return p[size_t(a)] > p[size_t(b)] || (p[size_t(a)] == p[size_t(b)] && a < b);
    });
    idx.resize(size_t(k));
    return idx;
}

// Code points before byte offset `b` of UTF-8 text.
int64_t code_points_before(const std::string& s, int64_t b) {
    int64_t n = 0;
    for (int64_t i = 0; i < b && i < int64_t(s.size()); ++i)
        n += (static_cast<unsigned char>(s[size_t(i)]) & 0xC0) != 0x80;
    return n;
}

}  // namespace

PredictLengths predict_lengths(const ModelConfig& c, const PredictOptions& o) {
    const Task task = task_of(c);
    const int64_t positions = c.max_positions();
    PredictLengths l;
    if (o.max_seq_length) {
        LOOM_CHECK(*o.max_seq_length > 0, "--max-seq-length {} must be positive",
                   *o.max_seq_length);
        check_max_length(c, "--max-seq-length", *o.max_seq_length);
        l.max_seq_length = *o.max_seq_length;
        l.max_seq_length_from = "--max-seq-length";
    } else {
        // HF's QA pipeline reads 384-token windows; the other pipelines take
        // what the tokenizer allows, 512 for BERT-sized encoders. Generation
        // keeps the model's whole context.
        const int64_t cap = task == Task::question_answering ? 384
                            : task == Task::causal_lm        ? positions
                                                             : 512;
        l.max_seq_length = std::min(cap, positions);
        l.max_seq_length_from =
            cap < positions ? fmt::format("default: {}, fewer than the model's {}", cap,
                                          describe_max_positions(c))
                            : fmt::format("default: the model's {}", describe_max_positions(c));
    }
    if (task != Task::question_answering) return l;
    if (o.doc_stride) {
        LOOM_CHECK(*o.doc_stride >= 0 && *o.doc_stride < l.max_seq_length,
                   "--doc-stride {} must be at least 0 and less than max_seq_length {} ({}): "
                   "the windows overlap by doc_stride tokens",
                   *o.doc_stride, l.max_seq_length, l.max_seq_length_from);
        l.doc_stride = *o.doc_stride;
        l.doc_stride_from = "--doc-stride";
    } else {
        // HF's 128 at 384, a third of the window, so that small models keep
        // room for the question and fresh context in every window.
        l.doc_stride = std::min<int64_t>(128, l.max_seq_length / 3);
        l.doc_stride_from = "default: min(128, max_seq_length / 3)";
    }
    return l;
}

Predictor::Predictor(const std::string& model_dir, PredictOptions options)
    : opts_(std::move(options)) {
    config_ = load_hf_config(model_dir);
    lengths_ = predict_lengths(config_, opts_);
    const std::string tok_path = (fs::path(model_dir) / "tokenizer.json").string();
    LOOM_CHECK(fs::exists(tok_path),
               "{}: no tokenizer.json (a model folder written by loom train has one)", model_dir);
    tok_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(tok_path));
    tok_->set_truncation(std::nullopt);
    tok_->set_padding(std::nullopt);
    model_ = build_model(config_);
    model_->load(SafetensorsFile::open(safetensors_weights_in(model_dir)));
    model_->set_logits_scope(LogitsScope::all_positions);
}

Predictor::~Predictor() = default;

std::vector<std::string> Predictor::notes() const {
    std::vector<std::string> out;
    out.push_back(fmt::format("max_seq_length {} ({})", lengths_.max_seq_length,
                              lengths_.max_seq_length_from));
    const Task task = task_of(config_);
    if (task == Task::question_answering)
        out.push_back(
            fmt::format("doc_stride {} ({})", lengths_.doc_stride, lengths_.doc_stride_from));
    if (truncated_ == 0) return out;
    switch (task) {
        case Task::question_answering:
            out.push_back(fmt::format(
                "{} of {} contexts did not fit one window of {} tokens and were read in "
                "overlapping windows",
                truncated_, inputs_, lengths_.max_seq_length));
            break;
        case Task::causal_lm:
            out.push_back(fmt::format(
                "{} of {} prompts grew past max_seq_length {} tokens; the model saw the last {} "
                "tokens of each",
                truncated_, inputs_, lengths_.max_seq_length, lengths_.max_seq_length));
            break;
        default:
            out.push_back(fmt::format(
                "{} of {} inputs were longer than max_seq_length {} tokens and were truncated",
                truncated_, inputs_, lengths_.max_seq_length));
            break;
    }
    return out;
}

void Predictor::run(const std::vector<int64_t>& ids, const std::vector<int64_t>& types) {
    ModelInputs in;
    in.B = 1;
    in.T = int64_t(ids.size());
    in.input_ids = ids.data();
    in.token_type_ids = config_.type_vocab_size > 0 ? types.data() : nullptr;
    model_->forward(in, DropoutPlan{});
}

std::vector<json> Predictor::predict_file(const std::string& path) {
    ReadOptions ro = opts_.columns;
    const Task task = task_of(config_);
    if (task == Task::question_answering) {
        ro.kind = RecordKind::qa;
        ro.require_answers = false;  // questions to answer; answers, if given, are ignored
        return predict(read_records(path, ro));
    }
    // Inputs carry no labels: read the text (and the pair from its own column).
    ro.kind = RecordKind::text;
    std::vector<Record> records = read_records(path, ro);
    if (task == Task::sequence_classification && !ro.text_pair_column.empty()) {
        ro.text_column = ro.text_pair_column;
        const std::vector<Record> pairs = read_records(path, ro);
        LOOM_CHECK(pairs.size() == records.size(), "{}: {} texts but {} '{}' values", path,
                   records.size(), pairs.size(), ro.text_pair_column);
        for (size_t i = 0; i < records.size(); ++i) {
            records[i].text_pair = pairs[i].text;
            records[i].has_pair = true;
        }
    }
    return predict(records);
}

std::vector<json> Predictor::predict(const std::vector<Record>& records) {
    inputs_ += int64_t(records.size());
    switch (task_of(config_)) {
        case Task::sequence_classification:
            return classify(records);
        case Task::question_answering:
            return answer(records);
        case Task::masked_lm: {
            std::vector<json> out;
            for (const Record& r : records) out.push_back(fill_masks(r));
            return out;
        }
        case Task::causal_lm: {
            std::vector<json> out;
            for (const Record& r : records) out.push_back(continue_text(r));
            return out;
        }
        case Task::base:
            break;  // task_of refuses a model without a head
    }
    return {};
}

std::vector<json> Predictor::classify(const std::vector<Record>& records) {
    FeaturizeOptions fo;
    fo.task = Task::sequence_classification;
    fo.max_seq_length = lengths_.max_seq_length;
    fo.label_names = config_.id2label;
    const FeatureSet fs = featurize(records, *tok_, fo);
    truncated_ += fs.stats.truncated;
    std::vector<json> out;
    for (const Feature& f : fs.features) {
        run(std::vector<int64_t>(f.ids.begin(), f.ids.end()),
            std::vector<int64_t>(f.type_ids.begin(), f.type_ids.end()));
        const Tensor logits = model_->outputs().at("logits");  // (1, num_labels)
        const int64_t L = logits.shape[1];
        const std::vector<double> p = softmax(logits.data<float>(), L);
        json scores = json::object();
        for (int64_t i = 0; i < L; ++i) {
            const std::string name = size_t(i) < config_.id2label.size()
                                         ? config_.id2label[size_t(i)]
                                         : std::to_string(i);
            scores[name] = p[size_t(i)];
        }
        const int64_t best = top_k(p, 1)[0];
        out.push_back(
            {{"label", size_t(best) < config_.id2label.size() ? config_.id2label[size_t(best)]
                                                              : std::to_string(best)},
             {"score", p[size_t(best)]},
             {"scores", scores}});
    }
    return out;
}

std::vector<json> Predictor::answer(const std::vector<Record>& records) {
    FeaturizeOptions fo;
    fo.task = Task::question_answering;
    fo.max_seq_length = lengths_.max_seq_length;
    fo.doc_stride = lengths_.doc_stride;
    const FeatureSet fs = featurize(records, *tok_, fo);
    truncated_ += fs.stats.truncated;
    QaLogits logits(fs.features.size());
    for (size_t i = 0; i < fs.features.size(); ++i) {
        const Feature& f = fs.features[i];
        run(std::vector<int64_t>(f.ids.begin(), f.ids.end()),
            std::vector<int64_t>(f.type_ids.begin(), f.type_ids.end()));
        const auto o = model_->outputs();
        const int64_t T = int64_t(f.ids.size());
        logits.store({int64_t(i)}, T, o.at("start_logits").data<float>(),
                     o.at("end_logits").data<float>());
    }
    QaPostprocessOptions po;
    po.max_answer_length = opts_.max_answer_length;
    std::vector<json> out;
    const std::vector<QaPrediction> preds = qa_postprocess(fs, logits, po);  // one per example
    for (size_t i = 0; i < preds.size(); ++i) {
        const QaPrediction& p = preds[i];
        const Record& r = fs.examples[i];
        json j = {{"answer", p.text}, {"score", p.score}};
        if (!r.id.empty()) j["id"] = r.id;
        if (p.start_byte >= 0) {
            j["start"] = code_points_before(r.context, p.start_byte);
            j["end"] = code_points_before(r.context, p.end_byte);
        } else {
            j["start"] = j["end"] = nullptr;
        }
        out.push_back(std::move(j));
    }
    return out;
}

json Predictor::fill_masks(const Record& r) {
    std::optional<uint32_t> mask = tok_->token_to_id("[MASK]");
    if (!mask) mask = tok_->token_to_id("<mask>");
    LOOM_CHECK(mask.has_value(), "masked LM: the tokenizer has neither [MASK] nor <mask>");
    // Truncated like the fill-mask pipeline with truncation on: the special
    // tokens stay, the text's tail goes.
    tokenizer::TruncationParams trunc;
    trunc.max_length = size_t(lengths_.max_seq_length);
    const tokenizer::Encoding enc =
        tok_->encode_with(r.text, std::nullopt, true, trunc, std::nullopt);
    const bool cut = !enc.overflowing.empty();
    truncated_ += cut;
    const std::vector<int64_t> ids(enc.ids.begin(), enc.ids.end());
    const std::vector<int64_t> types(enc.type_ids.begin(), enc.type_ids.end());
    run(ids, types);
    const Tensor logits = model_->outputs().at("logits");  // (1, T, V)
    const int64_t V = logits.shape[2];
    json masks = json::array();
    std::vector<uint32_t> filled = enc.ids;
    for (size_t t = 0; t < enc.ids.size(); ++t) {
        if (enc.ids[t] != *mask) continue;
        const std::vector<double> p = softmax(logits.data<float>() + int64_t(t) * V, V);
        json choices = json::array();
        const auto best = top_k(p, opts_.top_k);
        for (int64_t id : best)
            choices.push_back({{"token", tok_->id_to_token(uint32_t(id)).value_or("")},
                               {"id", id},
                               {"score", p[size_t(id)]}});
        filled[t] = uint32_t(best[0]);
        masks.push_back(std::move(choices));
    }
    if (masks.empty()) {
        bool later = false;
        for (const tokenizer::Encoding& o : enc.overflowing)
            later = later || std::find(o.ids.begin(), o.ids.end(), *mask) != o.ids.end();
        LOOM_CHECK(!later,
                   "masked LM: every mask token lies past max_seq_length {}, where the text was "
                   "truncated: '{}'",
                   lengths_.max_seq_length, r.text);
        LOOM_FAIL("masked LM: the text has no mask token to fill: '{}'", r.text);
    }
    return {{"masks", masks}, {"filled", tok_->decode(filled, true)}};
}

json Predictor::continue_text(const Record& r) {
    const tokenizer::Encoding enc = tok_->encode(r.text, false);
    LOOM_CHECK(!enc.ids.empty(), "causal LM: an empty prompt");
    std::vector<int64_t> ids(enc.ids.begin(), enc.ids.end());
    const size_t prompt_len = ids.size();
    const std::optional<uint32_t> eos = tok_->token_to_id("<|endoftext|>");
    const PhiloxStream rng(opts_.seed, 0, 0x5A);
    bool cut = false;
    for (int64_t n = 0; n < opts_.max_new_tokens; ++n) {
        // The last max_seq_length tokens are the context.
        const size_t window = size_t(lengths_.max_seq_length);
        const size_t start = ids.size() > window ? ids.size() - window : 0;
        cut = cut || start > 0;
        const std::vector<int64_t> ctx(ids.begin() + int64_t(start), ids.end());
        run(ctx, std::vector<int64_t>(ctx.size(), 0));
        const Tensor logits = model_->outputs().at("logits");  // (1, T, V)
        const int64_t V = logits.shape[2];
        const float* last = logits.data<float>() + (int64_t(ctx.size()) - 1) * V;
        int64_t next = 0;
        if (!opts_.sample) {
            next = int64_t(std::max_element(last, last + V) - last);
        } else {
            const std::vector<double> p = softmax(last, V, opts_.temperature);
            const auto pool = top_k(p, std::max<int64_t>(1, opts_.top_k));
            double mass = 0;
            for (int64_t id : pool) mass += p[size_t(id)];
            double u = double(rng.uniform(uint64_t(n))) * mass;
            next = pool.back();
            for (int64_t id : pool) {
                if (u < p[size_t(id)]) {
                    next = id;
                    break;
                }
                u -= p[size_t(id)];
            }
        }
        ids.push_back(next);
        if (eos && next == int64_t(*eos)) break;
    }
    truncated_ += cut;
    const std::vector<uint32_t> gen(ids.begin() + int64_t(prompt_len), ids.end());
    const std::vector<uint32_t> all(ids.begin(), ids.end());
    return {{"continuation", tok_->decode(gen, true)}, {"text", tok_->decode(all, true)}};
}

}  // namespace loom
