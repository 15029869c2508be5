// Writes HF model folders (see export_hf.h).
#include "train/export_hf.h"

#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "io/file_utils.h"
#include "io/safetensors.h"

namespace loom {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct SpecialTokens {
    std::string cls, sep, pad, mask, unk, bos, eos;
};

// Roles by the token's text: the conventions of BERT ([CLS]), RoBERTa (<s>),
// ALBERT (<pad>, <unk>, [CLS]) and GPT-2 (<|endoftext|> for everything).
SpecialTokens special_tokens_of(const json& tok) {
    SpecialTokens s;
    if (!tok.contains("added_tokens") || !tok["added_tokens"].is_array()) return s;
    for (const json& t : tok["added_tokens"]) {
        if (!t.value("special", false) || !t.contains("content")) continue;
        const std::string c = t["content"].get<std::string>();
        if (c == "[CLS]") s.cls = c;
        else if (c == "[SEP]") s.sep = c;
        else if (c == "[PAD]" || c == "<pad>") s.pad = c;
        else if (c == "[MASK]" || c == "<mask>") s.mask = c;
        else if (c == "[UNK]" || c == "<unk>") s.unk = c;
        else if (c == "<s>") s.bos = c;
        else if (c == "</s>") s.eos = c;
        else if (c == "<|endoftext|>") s.bos = s.eos = s.unk = c;
    }
    // RoBERTa uses <s>/</s> as CLS/SEP too.
    if (s.cls.empty() && !s.bos.empty() && s.bos != "<|endoftext|>") s.cls = s.bos;
    if (s.sep.empty() && !s.eos.empty() && s.eos != "<|endoftext|>") s.sep = s.eos;
    return s;
}

json special_map(const SpecialTokens& s) {
    json j = json::object();
    const std::pair<const char*, const std::string*> roles[] = {
        {"bos_token", &s.bos}, {"eos_token", &s.eos},   {"unk_token", &s.unk},
        {"sep_token", &s.sep}, {"pad_token", &s.pad},   {"cls_token", &s.cls},
        {"mask_token", &s.mask}};
    for (const auto& [k, v] : roles)
        if (!v->empty()) j[k] = *v;
    return j;
}

json parse_tokenizer(const std::string& text) {
    try {
        return json::parse(text);
    } catch (const json::exception& e) {
        LOOM_FAIL("tokenizer.json is not valid JSON: {}", e.what());
    }
}

std::string tokenizer_class(ModelFamily f) {
    switch (f) {
        case ModelFamily::bert: return "BertTokenizer";
        case ModelFamily::roberta: return "RobertaTokenizer";
        case ModelFamily::distilbert: return "DistilBertTokenizer";
        case ModelFamily::albert: return "AlbertTokenizer";
        case ModelFamily::gpt2: return "GPT2Tokenizer";
        case ModelFamily::llama:
        case ModelFamily::mistral:
        case ModelFamily::qwen2: return "PreTrainedTokenizerFast";
    }
    return "PreTrainedTokenizerFast";
}

// BertNormalizer's lowercase flag (HF's do_lower_case), when there is one.
std::optional<bool> lowercase_of(const json& tok) {
    if (!tok.contains("normalizer") || !tok["normalizer"].is_object()) return std::nullopt;
    const json& n = tok["normalizer"];
    if (n.value("type", "") == "BertNormalizer" && n.contains("lowercase") &&
        n["lowercase"].is_boolean())
        return n["lowercase"].get<bool>();
    return std::nullopt;
}

}  // namespace

std::string tokenizer_config_json(const std::string& tokenizer_json, const ModelConfig& config) {
    const json tok = parse_tokenizer(tokenizer_json);
    json j = special_map(special_tokens_of(tok));
    j["tokenizer_class"] = tokenizer_class(config.family);
    // RoBERTa's table has 2 offset rows; the usable length is what HF reports.
    int64_t max_len = config.max_position_embeddings;
    if (config.family == ModelFamily::roberta && max_len > 2) max_len -= 2;
    if (max_len > 0) j["model_max_length"] = max_len;
    if (auto lc = lowercase_of(tok)) j["do_lower_case"] = *lc;
    j["clean_up_tokenization_spaces"] = true;
    return j.dump(2) + "\n";
}

std::string special_tokens_map_json(const std::string& tokenizer_json) {
    return special_map(special_tokens_of(parse_tokenizer(tokenizer_json))).dump(2) + "\n";
}

std::map<std::string, std::string> hf_side_files(const ModelConfig& config,
                                                 const std::string& tokenizer_path) {
    std::map<std::string, std::string> files;
    files["config.json"] = config_to_json(config);
    if (!tokenizer_path.empty()) {
        const std::string tok = read_file(tokenizer_path);
        files["tokenizer.json"] = tok;
        files["tokenizer_config.json"] = tokenizer_config_json(tok, config);
        files["special_tokens_map.json"] = special_tokens_map_json(tok);
    }
    return files;
}

void export_hf_folder(const std::string& dir, const ModelConfig& config,
                      const std::map<std::string, Tensor>& params,
                      const std::string& tokenizer_path, uint64_t max_shard_bytes) {
    ensure_dir(dir);
    std::map<std::string, Tensor> typed;
    for (const auto& [name, t] : params) {
        const bool floating = t.dtype == DType::f32 || t.dtype == DType::bf16 ||
                              t.dtype == DType::f16 || t.dtype == DType::f64;
        typed[name] = floating && t.dtype != config.torch_dtype ? t.to(config.torch_dtype) : t;
    }
    safetensors_write_sharded(dir, typed, max_shard_bytes, {{"format", "pt"}});
    for (const auto& [name, text] : hf_side_files(config, tokenizer_path))
        write_file_atomic((fs::path(dir) / name).string(), text);
}

}  // namespace loom
