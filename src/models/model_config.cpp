// config.json parsing and export for BERT, RoBERTa, DistilBERT, ALBERT and GPT-2.
//
// Defaults are transformers 4.40's per-family config defaults, so a config
// that omits an optional key means what it means to HF. Size keys are required:
// a default hidden size paired with a checkpoint's own weights would only fail
// later with a confusing shape error.
#include "models/model_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/check.h"
#include "models/model_config_llama.h"

namespace loom {

namespace {

using json = nlohmann::json;

struct ArchEntry {
    const char* name;
    ModelFamily family;
    Task task;
};

// architectures[0] -> (family, head). The *ForPreTraining classes carry an
// extra NSP/SOP head that Loom does not train; their MLM weights load as-is.
constexpr ArchEntry k_architectures[] = {
    {"BertModel", ModelFamily::bert, Task::base},
    {"BertForMaskedLM", ModelFamily::bert, Task::masked_lm},
    {"BertForPreTraining", ModelFamily::bert, Task::masked_lm},
    {"BertForSequenceClassification", ModelFamily::bert, Task::sequence_classification},
    {"BertForQuestionAnswering", ModelFamily::bert, Task::question_answering},
    {"RobertaModel", ModelFamily::roberta, Task::base},
    {"RobertaForMaskedLM", ModelFamily::roberta, Task::masked_lm},
    {"RobertaForSequenceClassification", ModelFamily::roberta,
     Task::sequence_classification},
    {"RobertaForQuestionAnswering", ModelFamily::roberta, Task::question_answering},
    {"DistilBertModel", ModelFamily::distilbert, Task::base},
    {"DistilBertForMaskedLM", ModelFamily::distilbert, Task::masked_lm},
    {"DistilBertForSequenceClassification", ModelFamily::distilbert,
     Task::sequence_classification},
    {"DistilBertForQuestionAnswering", ModelFamily::distilbert, Task::question_answering},
    {"AlbertModel", ModelFamily::albert, Task::base},
    {"AlbertForMaskedLM", ModelFamily::albert, Task::masked_lm},
    {"AlbertForPreTraining", ModelFamily::albert, Task::masked_lm},
    {"AlbertForSequenceClassification", ModelFamily::albert, Task::sequence_classification},
    {"AlbertForQuestionAnswering", ModelFamily::albert, Task::question_answering},
    {"GPT2Model", ModelFamily::gpt2, Task::base},
    {"GPT2LMHeadModel", ModelFamily::gpt2, Task::causal_lm},
    {"LlamaModel", ModelFamily::llama, Task::base},
    {"LlamaForCausalLM", ModelFamily::llama, Task::causal_lm},
    {"LlamaForSequenceClassification", ModelFamily::llama, Task::sequence_classification},
    {"MistralModel", ModelFamily::mistral, Task::base},
    {"MistralForCausalLM", ModelFamily::mistral, Task::causal_lm},
    {"Qwen2Model", ModelFamily::qwen2, Task::base},
    {"Qwen2ForCausalLM", ModelFamily::qwen2, Task::causal_lm},
};

std::string supported_architectures() {
    std::string s;
    for (const auto& a : k_architectures) {
        if (!s.empty()) s += ", ";
        s += a.name;
    }
    return s;
}

// Reads typed values from the JSON object, naming the file and key on error.
class Reader {
public:
    Reader(const json& j, const std::string& source) : j_(j), source_(source) {}

    bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

    int64_t require_int(std::initializer_list<const char*> keys) const {
        for (const char* k : keys)
            if (has(k)) return as_int(k);
        std::string names;
        for (const char* k : keys) names += std::string(names.empty() ? "" : " or ") + "'" + k + "'";
        LOOM_FAIL("{}: missing required key {} (the model's size cannot be guessed)", source_,
                  names);
    }
    int64_t opt_int(const char* key, int64_t def) const { return has(key) ? as_int(key) : def; }
    double opt_num(const char* key, double def) const {
        if (!has(key)) return def;
        LOOM_CHECK(j_[key].is_number(), "{}: key '{}' must be a number, found {}", source_, key,
                   j_[key].dump());
        return j_[key].get<double>();
    }
    bool opt_bool(const char* key, bool def) const {
        if (!has(key)) return def;
        LOOM_CHECK(j_[key].is_boolean(), "{}: key '{}' must be true or false, found {}", source_,
                   key, j_[key].dump());
        return j_[key].get<bool>();
    }
    std::string opt_str(const char* key, const std::string& def) const {
        if (!has(key)) return def;
        LOOM_CHECK(j_[key].is_string(), "{}: key '{}' must be a string, found {}", source_, key,
                   j_[key].dump());
        return j_[key].get<std::string>();
    }

private:
    int64_t as_int(const char* key) const {
        const json& v = j_[key];
        LOOM_CHECK(v.is_number_integer() || (v.is_number_float() &&
                                             v.get<double>() == double(int64_t(v.get<double>()))),
                   "{}: key '{}' must be an integer, found {}", source_, key, v.dump());
        return v.is_number_integer() ? v.get<int64_t>() : int64_t(v.get<double>());
    }
    const json& j_;
    const std::string& source_;
};

void parse_labels(const json& j, const Reader& r, ModelConfig& c) {
    if (j.contains("id2label") && j["id2label"].is_object() && !j["id2label"].empty()) {
        std::map<int64_t, std::string> by_id;
        for (auto it = j["id2label"].begin(); it != j["id2label"].end(); ++it) {
            int64_t id = -1;
            try {
                id = std::stoll(it.key());
            } catch (const std::exception&) {
                LOOM_FAIL("{}: id2label key '{}' is not an integer", c.source, it.key());
            }
            LOOM_CHECK(it.value().is_string(), "{}: id2label['{}'] must be a string", c.source,
                       it.key());
            by_id[id] = it.value().get<std::string>();
        }
        c.num_labels = int64_t(by_id.size());
        c.id2label.clear();
        for (int64_t i = 0; i < c.num_labels; ++i) {
            auto it = by_id.find(i);
            LOOM_CHECK(it != by_id.end(), "{}: id2label has {} entries but no id {}", c.source,
                       c.num_labels, i);
            c.id2label.push_back(it->second);
        }
    } else {
        c.num_labels = r.opt_int("num_labels", 2);
        c.id2label.clear();
        for (int64_t i = 0; i < c.num_labels; ++i) c.id2label.push_back("LABEL_" + std::to_string(i));
    }
    if (r.has("num_labels")) {
        LOOM_CHECK(r.opt_int("num_labels", 0) == c.num_labels,
                   "{}: num_labels {} disagrees with id2label's {} entries", c.source,
                   r.opt_int("num_labels", 0), c.num_labels);
    }
    c.problem_type = r.opt_str("problem_type", "");
}

void parse_bert_like(const Reader& r, ModelConfig& c) {
    c.vocab_size = r.require_int({"vocab_size"});
    c.hidden_size = r.require_int({"hidden_size"});
    c.num_hidden_layers = r.require_int({"num_hidden_layers"});
    c.num_attention_heads = r.require_int({"num_attention_heads"});
    c.intermediate_size = r.require_int({"intermediate_size"});
    c.max_position_embeddings = r.opt_int("max_position_embeddings", 512);
    c.type_vocab_size = r.opt_int("type_vocab_size", 2);
    const bool albert = c.family == ModelFamily::albert;
    c.hidden_act = r.opt_str("hidden_act", albert ? "gelu_new" : "gelu");
    c.layer_norm_eps = r.opt_num("layer_norm_eps", 1e-12);
    c.pad_token_id = r.opt_int("pad_token_id", c.family == ModelFamily::roberta ? 1 : 0);
    const double hidden = r.opt_num("hidden_dropout_prob", albert ? 0.0 : 0.1);
    c.hidden_dropout = c.embedding_dropout = hidden;
    c.attention_dropout = r.opt_num("attention_probs_dropout_prob", albert ? 0.0 : 0.1);
    if (albert) {
        c.embedding_size = r.opt_int("embedding_size", 128);
        c.num_hidden_groups = r.opt_int("num_hidden_groups", 1);
        c.inner_group_num = r.opt_int("inner_group_num", 1);
        c.classifier_dropout = r.opt_num("classifier_dropout_prob", 0.1);
    } else {
        c.embedding_size = c.hidden_size;
        // BERT/RoBERTa: classifier_dropout null means hidden_dropout_prob.
        c.classifier_dropout = r.opt_num("classifier_dropout", hidden);
    }
    const std::string pos = r.opt_str("position_embedding_type", "absolute");
    LOOM_CHECK(pos == "absolute", "{}: position_embedding_type '{}' is not supported (only 'absolute')",
               c.source, pos);
}

void parse_distilbert(const Reader& r, ModelConfig& c) {
    c.vocab_size = r.require_int({"vocab_size"});
    c.hidden_size = r.require_int({"dim", "hidden_size"});
    c.num_hidden_layers = r.require_int({"n_layers", "num_hidden_layers"});
    c.num_attention_heads = r.require_int({"n_heads", "num_attention_heads"});
    c.intermediate_size = r.require_int({"hidden_dim", "intermediate_size"});
    c.embedding_size = c.hidden_size;
    c.max_position_embeddings = r.opt_int("max_position_embeddings", 512);
    c.type_vocab_size = 0;
    c.hidden_act = r.opt_str("activation", "gelu");
    c.layer_norm_eps = 1e-12;  // fixed in DistilBERT's modelling code, not in the config
    c.pad_token_id = r.opt_int("pad_token_id", 0);
    c.sinusoidal_pos_embds = r.opt_bool("sinusoidal_pos_embds", false);
    c.hidden_dropout = c.embedding_dropout = r.opt_num("dropout", 0.1);
    c.attention_dropout = r.opt_num("attention_dropout", 0.1);
    c.classifier_dropout = r.opt_num("seq_classif_dropout", 0.2);
    c.qa_dropout = r.opt_num("qa_dropout", 0.1);
}

void parse_gpt2(const Reader& r, ModelConfig& c) {
    c.vocab_size = r.require_int({"vocab_size"});
    c.hidden_size = r.require_int({"n_embd", "hidden_size"});
    c.num_hidden_layers = r.require_int({"n_layer", "num_hidden_layers"});
    c.num_attention_heads = r.require_int({"n_head", "num_attention_heads"});
    c.intermediate_size = r.opt_int("n_inner", 4 * c.hidden_size);  // null -> 4 * n_embd
    c.embedding_size = c.hidden_size;
    c.max_position_embeddings = r.opt_int("n_positions", r.opt_int("max_position_embeddings", 1024));
    c.type_vocab_size = 0;
    c.hidden_act = r.opt_str("activation_function", "gelu_new");
    c.layer_norm_eps = r.opt_num("layer_norm_epsilon", 1e-5);
    c.pad_token_id = r.opt_int("pad_token_id", -1);
    c.hidden_dropout = r.opt_num("resid_pdrop", 0.1);
    c.embedding_dropout = r.opt_num("embd_pdrop", 0.1);
    c.attention_dropout = r.opt_num("attn_pdrop", 0.1);
    c.classifier_dropout = r.opt_num("summary_first_dropout", 0.1);
    c.scale_attn_weights = r.opt_bool("scale_attn_weights", true);
    c.scale_attn_by_inverse_layer_idx = r.opt_bool("scale_attn_by_inverse_layer_idx", false);
}

void validate(const ModelConfig& c) {
    auto positive = [&](int64_t v, const char* what) {
        LOOM_CHECK(v > 0, "{}: {} must be positive, found {}", c.source, what, v);
    };
    positive(c.vocab_size, "vocab_size");
    positive(c.hidden_size, "hidden size");
    positive(c.num_hidden_layers, "number of layers");
    positive(c.num_attention_heads, "number of attention heads");
    positive(c.intermediate_size, "intermediate size");
    positive(c.embedding_size, "embedding_size");
    positive(c.max_position_embeddings, "max_position_embeddings");
    LOOM_CHECK(c.max_positions() > 0,
               "{}: max_position_embeddings {} leaves no position for a token (RoBERTa numbers "
               "positions from pad_token_id + 1 = {})",
               c.source, c.max_position_embeddings, c.position_offset());
    LOOM_CHECK(c.hidden_size % c.num_attention_heads == 0,
               "{}: hidden size {} is not a multiple of the {} attention heads", c.source,
               c.hidden_size, c.num_attention_heads);
    LOOM_CHECK(c.num_hidden_groups >= 1 && c.num_hidden_layers % c.num_hidden_groups == 0,
               "{}: num_hidden_layers {} must be a multiple of num_hidden_groups {}", c.source,
               c.num_hidden_layers, c.num_hidden_groups);
    LOOM_CHECK(c.inner_group_num >= 1, "{}: inner_group_num must be >= 1", c.source);
    LOOM_CHECK(c.pad_token_id < c.vocab_size, "{}: pad_token_id {} is outside the vocabulary ({})",
               c.source, c.pad_token_id, c.vocab_size);
    for (double p : {c.hidden_dropout, c.embedding_dropout, c.attention_dropout,
                     c.classifier_dropout, c.qa_dropout})
        LOOM_CHECK(p >= 0.0 && p < 1.0, "{}: dropout probability {} outside [0, 1)", c.source,
                   p);
}

}  // namespace

std::string_view family_name(ModelFamily f) {
    switch (f) {
        case ModelFamily::bert: return "bert";
        case ModelFamily::roberta: return "roberta";
        case ModelFamily::distilbert: return "distilbert";
        case ModelFamily::albert: return "albert";
        case ModelFamily::gpt2: return "gpt2";
        case ModelFamily::llama: return "llama";
        case ModelFamily::mistral: return "mistral";
        case ModelFamily::qwen2: return "qwen2";
    }
    return "?";
}

ModelConfig parse_hf_config(const std::string& json_text, const std::string& source) {
    json j;
    try {
        j = json::parse(json_text);
    } catch (const json::exception& e) {  // parse_error, or out_of_range for huge numbers
        LOOM_FAIL("{}: not valid JSON: {}", source, e.what());
    }
    LOOM_CHECK(j.is_object(), "{}: expected a JSON object at the top level", source);
    ModelConfig c;
    c.source = source;
    c.json_text = json_text;
    Reader r(j, source);
    if (j.contains("torch_dtype") && !j["torch_dtype"].is_null()) {
        const json& d = j["torch_dtype"];
        const std::optional<DType> t =
            d.is_string() ? dtype_from_name(d.get<std::string>()) : std::nullopt;
        LOOM_CHECK(
            t && (*t == DType::f32 || *t == DType::bf16 || *t == DType::f16 || *t == DType::f64),
            "{}: torch_dtype {} is not a weight type Loom reads (expected \"float32\", "
            "\"bfloat16\", \"float16\" or \"float64\")",
            source, d.dump());
        c.torch_dtype = *t;
    }

    if (j.contains("architectures") && j["architectures"].is_array() &&
        !j["architectures"].empty()) {
        LOOM_CHECK(j["architectures"][0].is_string(), "{}: architectures[0] must be a string",
                   source);
        c.architecture = j["architectures"][0].get<std::string>();
        const ArchEntry* found = nullptr;
        for (const auto& a : k_architectures)
            if (c.architecture == a.name) found = &a;
        LOOM_CHECK(found != nullptr, "{}: architectures[0] '{}' is not supported; supported: {}",
                   source, c.architecture, supported_architectures());
        c.family = found->family;
        c.task = found->task;
    } else {
        // No architectures: a base model named by model_type.
        LOOM_CHECK(r.has("model_type"), "{}: missing required key 'architectures' (or 'model_type')",
                   source);
        const std::string mt = r.opt_str("model_type", "");
        bool ok = false;
        for (ModelFamily f : {ModelFamily::bert, ModelFamily::roberta, ModelFamily::distilbert,
                              ModelFamily::albert, ModelFamily::gpt2, ModelFamily::llama,
                              ModelFamily::mistral, ModelFamily::qwen2})
            if (family_name(f) == mt) c.family = f, ok = true;
        LOOM_CHECK(ok, "{}: model_type '{}' is not supported; supported: bert, roberta, distilbert, "
                       "albert, gpt2, llama, mistral, qwen2", source, mt);
        c.task = Task::base;
        c.architecture = architecture_name(c.family, c.task);
    }
    c.model_type = r.opt_str("model_type", std::string(family_name(c.family)));
    LOOM_CHECK(c.model_type == family_name(c.family),
               "{}: model_type '{}' does not match architecture '{}' (expected '{}')", source,
               c.model_type, c.architecture, family_name(c.family));

    switch (c.family) {
        case ModelFamily::bert:
        case ModelFamily::roberta:
        case ModelFamily::albert: parse_bert_like(r, c); break;
        case ModelFamily::distilbert: parse_distilbert(r, c); break;
        case ModelFamily::gpt2: parse_gpt2(r, c); break;
        case ModelFamily::llama:
        case ModelFamily::mistral:
        case ModelFamily::qwen2: parse_llama_config(j, c); break;
    }
    c.initializer_range = r.opt_num("initializer_range", 0.02);
    // The Llama family's configs default to an untied lm_head.
    c.tie_word_embeddings = r.opt_bool("tie_word_embeddings", !c.llama_like());
    parse_labels(j, r, c);
    validate(c);
    return c;
}

int64_t ModelConfig::position_offset() const {
    if (family != ModelFamily::roberta || pad_token_id < 0) return 0;
    return pad_token_id + 1;
}

int64_t ModelConfig::max_positions() const {
    return std::max<int64_t>(0, max_position_embeddings - position_offset());
}

std::string describe_max_positions(const ModelConfig& c) {
    const char* key = c.family == ModelFamily::gpt2 ? "n_positions" : "max_position_embeddings";
    std::string s =
        fmt::format("{} positions ({} {}", c.max_positions(), key, c.max_position_embeddings);
    if (c.position_offset() > 0)
        s += fmt::format(" minus RoBERTa's offset of {}", c.position_offset());
    s += ")";
    if (!c.source.empty()) s += ", " + c.source;
    return s;
}

void check_max_length(const ModelConfig& c, std::string_view what, int64_t length) {
    // Dynamic rope scaling exists for lengths past max_position_embeddings.
    if (c.llama_like() && c.rope_scaling_dynamic) return;
    LOOM_CHECK(length <= c.max_positions(), "{} {} exceeds what the model accepts: {}", what,
               length, describe_max_positions(c));
}

ModelConfig load_hf_config(const std::string& path) {
    namespace fs = std::filesystem;
    // A model folder (or a path that should have been one) means its config.json.
    std::string file = path;
    const bool is_json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
    if (fs::is_directory(path) || !is_json) file = (fs::path(path) / "config.json").string();
    std::ifstream in(file, std::ios::binary);
    LOOM_CHECK(in.good(), "cannot read model config {}: {}", file,
               fs::exists(file) ? "permission denied or unreadable" : "no such file");
    std::stringstream ss;
    ss << in.rdbuf();
    return parse_hf_config(ss.str(), file);
}

std::string architecture_name(ModelFamily f, Task t) {
    for (const auto& a : k_architectures)
        if (a.family == f && a.task == t && std::string_view(a.name).find("PreTraining") ==
                                                 std::string_view::npos)
            return a.name;
    LOOM_FAIL("task '{}' is not supported for model family '{}'", task_name(t), family_name(f));
}

void config_set_task(ModelConfig& c, Task t, int64_t num_labels) {
    c.architecture = architecture_name(c.family, t);
    c.task = t;
    if (num_labels > 0 && num_labels != c.num_labels) {
        c.num_labels = num_labels;
        c.id2label.clear();
        for (int64_t i = 0; i < num_labels; ++i) c.id2label.push_back("LABEL_" + std::to_string(i));
    }
}

std::string config_to_json(const ModelConfig& c) {
    json j = c.json_text.empty() ? json::object() : json::parse(c.json_text);
    j["architectures"] = json::array({c.architecture});
    j["torch_dtype"] = std::string(dtype_torch_name(c.torch_dtype));
    j["model_type"] = std::string(family_name(c.family));
    j["vocab_size"] = c.vocab_size;
    j["initializer_range"] = c.initializer_range;
    if (c.pad_token_id >= 0) j["pad_token_id"] = c.pad_token_id;
    switch (c.family) {
        case ModelFamily::bert:
        case ModelFamily::roberta:
        case ModelFamily::albert:
            j["hidden_size"] = c.hidden_size;
            j["num_hidden_layers"] = c.num_hidden_layers;
            j["num_attention_heads"] = c.num_attention_heads;
            j["intermediate_size"] = c.intermediate_size;
            j["max_position_embeddings"] = c.max_position_embeddings;
            j["type_vocab_size"] = c.type_vocab_size;
            j["hidden_act"] = c.hidden_act;
            j["layer_norm_eps"] = c.layer_norm_eps;
            j["hidden_dropout_prob"] = c.hidden_dropout;
            j["attention_probs_dropout_prob"] = c.attention_dropout;
            if (c.family == ModelFamily::albert) {
                j["embedding_size"] = c.embedding_size;
                j["num_hidden_groups"] = c.num_hidden_groups;
                j["inner_group_num"] = c.inner_group_num;
                j["classifier_dropout_prob"] = c.classifier_dropout;
            } else if (!(j.contains("classifier_dropout") && j["classifier_dropout"].is_null() &&
                         c.classifier_dropout == c.hidden_dropout)) {
                // null means "same as hidden_dropout_prob"; keep it null when that still holds.
                j["classifier_dropout"] = c.classifier_dropout;
            }
            break;
        case ModelFamily::distilbert:
            j["dim"] = c.hidden_size;
            j["n_layers"] = c.num_hidden_layers;
            j["n_heads"] = c.num_attention_heads;
            j["hidden_dim"] = c.intermediate_size;
            j["max_position_embeddings"] = c.max_position_embeddings;
            j["activation"] = c.hidden_act;
            j["sinusoidal_pos_embds"] = c.sinusoidal_pos_embds;
            j["dropout"] = c.hidden_dropout;
            j["attention_dropout"] = c.attention_dropout;
            j["seq_classif_dropout"] = c.classifier_dropout;
            j["qa_dropout"] = c.qa_dropout;
            break;
        case ModelFamily::gpt2:
            j["n_embd"] = c.hidden_size;
            j["n_layer"] = c.num_hidden_layers;
            j["n_head"] = c.num_attention_heads;
            j["n_inner"] = c.intermediate_size;
            j["n_positions"] = c.max_position_embeddings;
            j["activation_function"] = c.hidden_act;
            j["layer_norm_epsilon"] = c.layer_norm_eps;
            j["resid_pdrop"] = c.hidden_dropout;
            j["embd_pdrop"] = c.embedding_dropout;
            j["attn_pdrop"] = c.attention_dropout;
            break;
        case ModelFamily::llama:
        case ModelFamily::mistral:
        case ModelFamily::qwen2: llama_config_to_json(c, j); break;
    }
    if (!c.tie_word_embeddings || c.llama_like())
        j["tie_word_embeddings"] = c.tie_word_embeddings;
    if (c.task == Task::sequence_classification) {
        json id2label = json::object(), label2id = json::object();
        for (size_t i = 0; i < c.id2label.size(); ++i) {
            id2label[std::to_string(i)] = c.id2label[i];
            label2id[c.id2label[i]] = int64_t(i);
        }
        j["id2label"] = id2label;
        j["label2id"] = label2id;
        j.erase("num_labels");
        if (!c.problem_type.empty()) j["problem_type"] = c.problem_type;
    }
    return j.dump(2) + "\n";
}

}  // namespace loom
