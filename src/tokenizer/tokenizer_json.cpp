// tokenizer.json: the top level, models, added tokens, truncation, padding.
// Follows HF tokenizers' serde formats (v0.22.2), including the legacy
// "a b" merges strings next to the current ["a", "b"] pairs.
#include "tokenizer/tokenizer_json.h"

#include <fstream>
#include <sstream>
#include <unordered_set>

#include "tokenizer/components.h"
#include "tokenizer/model.h"

namespace loom::tokenizer {
namespace {

// Vocabulary object {"token": id}; ids must be unique and dense (< size).
Vocab vocab_from_object(const JsonAt& j) {
    j.require_object();
    Vocab vocab;
    vocab.reserve(j.j.size());
    std::vector<char> seen(j.j.size(), 0);
    for (auto it = j.j.begin(); it != j.j.end(); ++it) {
        const JsonAt v = j.at(it.key());
        const uint64_t id = v.as_uint();
        if (id >= j.j.size())
            v.fail("id " + std::to_string(id) + " is out of range for a vocabulary of " +
                   std::to_string(j.j.size()) + " tokens");
        if (seen[id]) v.fail("id " + std::to_string(id) + " is used by more than one token");
        seen[id] = 1;
        vocab.emplace(it.key(), static_cast<uint32_t>(id));
    }
    return vocab;
}

std::optional<std::string> optional_string(const JsonAt& j, const std::string& key) {
    if (!j.find(key)) return std::nullopt;
    return j.at(key).as_string();
}

std::unique_ptr<Model> bpe_from_json(const JsonAt& j) {
    Vocab vocab = vocab_from_object(j.at("vocab"));
    const JsonAt merges_j = j.at("merges");
    merges_j.require_array();
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(merges_j.j.size());
    for (size_t i = 0; i < merges_j.j.size(); ++i) {
        const JsonAt m = merges_j.at(i);
        if (m.j.is_string()) {
            const std::string s = m.j.get<std::string>();
            const size_t sp = s.find(' ');
            if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
                m.fail("a merge string must be two tokens separated by one space, found '" + s + "'");
            merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        } else if (m.j.is_array()) {
            if (m.j.size() != 2) m.fail("a merge must be a pair [left, right], found " + std::to_string(m.j.size()) + " items");
            merges.emplace_back(m.at(size_t{0}).as_string(), m.at(size_t{1}).as_string());
        } else {
            m.fail(std::string("a merge must be a string \"a b\" or a pair [\"a\", \"b\"], found ") + m.type_name());
        }
    }
    BpeOptions opt;
    opt.unk_token = optional_string(j, "unk_token");
    opt.continuing_subword_prefix = optional_string(j, "continuing_subword_prefix");
    opt.end_of_word_suffix = optional_string(j, "end_of_word_suffix");
    opt.fuse_unk = j.get_bool("fuse_unk", false);
    opt.byte_fallback = j.get_bool("byte_fallback", false);
    opt.ignore_merges = j.get_bool("ignore_merges", false);
    if (j.find("dropout")) {
        const double p = j.at("dropout").as_double();
        if (p < 0.0 || p > 1.0) j.at("dropout").fail("dropout must be between 0 and 1");
        // NOTE: dropout is a training-time regulariser; encoding here is deterministic (as with dropout 0).
    }
    try {
        return std::make_unique<Bpe>(std::move(vocab), merges, std::move(opt));
    } catch (const TokenizerError& e) {
        // The model names the merge index ("merges/17: ..."); put it under /model.
        const std::string what = e.what();
        if (what.rfind("merges/", 0) == 0) {
            const size_t colon = what.find(':');
            j.at("merges").at(std::stoul(what.substr(7, colon - 7))).fail(what.substr(colon + 2));
        }
        j.fail(what);
    }
}

std::unique_ptr<Model> wordpiece_from_json(const JsonAt& j) {
    Vocab vocab = vocab_from_object(j.at("vocab"));
    const std::string unk = j.get_string("unk_token", "[UNK]");
    const std::string prefix = j.get_string("continuing_subword_prefix", "##");
    const uint64_t max_chars = j.get_uint("max_input_chars_per_word", 100);
    return std::make_unique<WordPiece>(std::move(vocab), unk, prefix, max_chars);
}

std::unique_ptr<Model> unigram_from_json(const JsonAt& j) {
    const JsonAt v = j.at("vocab");
    v.require_array();
    std::vector<std::pair<std::string, double>> vocab;
    vocab.reserve(v.j.size());
    for (size_t i = 0; i < v.j.size(); ++i) {
        const JsonAt item = v.at(i);
        if (!item.j.is_array() || item.j.size() != 2) item.fail("expected a [piece, score] pair");
        vocab.emplace_back(item.at(size_t{0}).as_string(), item.at(size_t{1}).as_double());
    }
    std::optional<size_t> unk_id;
    if (j.find("unk_id")) {
        const JsonAt u = j.at("unk_id");
        unk_id = u.as_uint();
        if (*unk_id >= vocab.size())
            u.fail("unk_id " + std::to_string(*unk_id) + " is out of range for a vocabulary of " +
                   std::to_string(vocab.size()) + " pieces");
    }
    return std::make_unique<Unigram>(std::move(vocab), unk_id, j.get_bool("byte_fallback", false));
}

// WordLevel: the whole word is looked up; unknown words map to unk_token.
class WordLevel final : public Model {
public:
    WordLevel(Vocab vocab, std::string unk) : vocab_(std::move(vocab)), unk_(std::move(unk)) {
        for (const auto& [t, id] : vocab_) vocab_r_[id] = t;
    }
    void tokenize(std::string_view word, std::vector<Token>& out) const override {
        auto it = vocab_.find(word);
        if (it != vocab_.end()) {
            out.push_back(Token{it->second, std::string(word), {0, word.size()}});
            return;
        }
        it = vocab_.find(unk_);
        if (it == vocab_.end()) throw TokenizerError("WordLevel: unk_token '" + unk_ + "' is not in the vocabulary");
        out.push_back(Token{it->second, unk_, {0, word.size()}});
    }
    std::optional<uint32_t> token_to_id(std::string_view token) const override {
        const auto it = vocab_.find(token);
        if (it == vocab_.end()) return std::nullopt;
        return it->second;
    }
    const std::string* id_to_token(uint32_t id) const override {
        const auto it = vocab_r_.find(id);
        return it == vocab_r_.end() ? nullptr : &it->second;
    }
    size_t vocab_size() const override { return vocab_.size(); }

private:
    Vocab vocab_;
    std::unordered_map<uint32_t, std::string> vocab_r_;
    std::string unk_;
};

std::vector<AddedToken> added_tokens_from_json(const JsonAt& j) {
    std::vector<AddedToken> out;
    if (j.j.is_null()) return out;
    j.require_array();
    for (size_t i = 0; i < j.j.size(); ++i) {
        const JsonAt t = j.at(i);
        t.require_object();
        AddedToken a;
        a.content = t.at("content").as_string();
        if (t.find("id")) t.at("id").as_uint();  // validated; the id is re-derived as HF does
        a.single_word = t.get_bool("single_word", false);
        a.lstrip = t.get_bool("lstrip", false);
        a.rstrip = t.get_bool("rstrip", false);
        a.special = t.get_bool("special", false);
        a.normalized = t.get_bool("normalized", !a.special);
        out.push_back(std::move(a));
    }
    return out;
}

// Template special-token ids must exist in the loaded vocabulary.
void check_post_processor_ids(const JsonAt& j, const Tokenizer& tok) {
    if (j.j.is_null() || !j.j.is_object()) return;
    const std::string type = j.get_string("type", "");
    if (type == "Sequence" && j.find("processors")) {
        const JsonAt ps = j.at("processors");
        for (size_t i = 0; i < ps.j.size(); ++i) check_post_processor_ids(ps.at(i), tok);
        return;
    }
    auto check = [&](const JsonAt& id_j) {
        const uint64_t id = id_j.as_uint();
        if (!tok.id_to_token(static_cast<uint32_t>(id)))
            id_j.fail("id " + std::to_string(id) + " is out of range for a vocabulary of " +
                      std::to_string(tok.vocab_size()) + " tokens");
    };
    if (type == "TemplateProcessing" && j.find("special_tokens")) {
        const JsonAt st = j.at("special_tokens");
        for (auto it = st.j.begin(); it != st.j.end(); ++it) {
            const JsonAt ids = st.at(it.key()).at("ids");
            for (size_t i = 0; i < ids.j.size(); ++i) check(ids.at(i));
        }
    } else if (type == "BertProcessing" || type == "RobertaProcessing") {
        for (const char* key : {"sep", "cls"})
            if (j.find(key)) check(j.at(key).at(size_t{1}));
    }
}

}  // namespace

std::unique_ptr<Model> model_from_json(const JsonAt& j) {
    j.require_object();
    std::string type = j.get_string("type", "");
    if (type.empty()) {  // untagged (old files): infer from the fields, as serde does
        if (j.find("merges")) {
            type = "BPE";
        } else if (j.find("vocab") && j.at("vocab").j.is_array()) {
            type = "Unigram";
        } else if (j.find("continuing_subword_prefix") || j.find("max_input_chars_per_word")) {
            type = "WordPiece";
        } else if (j.find("vocab")) {
            type = "WordLevel";
        } else {
            j.fail("model has no \"type\" and no vocabulary");
        }
    }
    if (type == "BPE") return bpe_from_json(j);
    if (type == "WordPiece") return wordpiece_from_json(j);
    if (type == "Unigram") return unigram_from_json(j);
    if (type == "WordLevel") return std::make_unique<WordLevel>(vocab_from_object(j.at("vocab")), j.get_string("unk_token", "<unk>"));
    j.at("type").fail("unknown model type '" + type + "' (expected BPE, WordPiece, Unigram or WordLevel)");
}

std::optional<TruncationParams> truncation_from_json(const JsonAt& j) {
    if (j.j.is_null()) return std::nullopt;
    j.require_object();
    TruncationParams t;
    const std::string dir = j.get_string("direction", "Right");
    if (dir == "Right") {
        t.direction = TruncationDirection::Right;
    } else if (dir == "Left") {
        t.direction = TruncationDirection::Left;
    } else {
        j.at("direction").fail("expected \"Left\" or \"Right\", found '" + dir + "'");
    }
    t.max_length = j.at("max_length").as_uint(UINT32_MAX);
    const std::string strategy = j.get_string("strategy", "LongestFirst");
    if (strategy == "LongestFirst") {
        t.strategy = TruncationStrategy::LongestFirst;
    } else if (strategy == "OnlyFirst") {
        t.strategy = TruncationStrategy::OnlyFirst;
    } else if (strategy == "OnlySecond") {
        t.strategy = TruncationStrategy::OnlySecond;
    } else {
        j.at("strategy").fail("expected LongestFirst, OnlyFirst or OnlySecond, found '" + strategy + "'");
    }
    t.stride = j.get_uint("stride", 0);
    return t;
}

std::optional<PaddingParams> padding_from_json(const JsonAt& j) {
    if (j.j.is_null()) return std::nullopt;
    j.require_object();
    PaddingParams p;
    if (j.find("strategy")) {
        const JsonAt s = j.at("strategy");
        if (s.j.is_string() && s.j.get<std::string>() == "BatchLongest") {
            p.batch_longest = true;
        } else if (s.j.is_object() && s.j.contains("Fixed")) {
            p.batch_longest = false;
            p.fixed_length = s.at("Fixed").as_uint(UINT32_MAX);
        } else {
            s.fail("expected \"BatchLongest\" or {\"Fixed\": n}");
        }
    }
    const std::string dir = j.get_string("direction", "Right");
    if (dir == "Right") {
        p.direction = PaddingDirection::Right;
    } else if (dir == "Left") {
        p.direction = PaddingDirection::Left;
    } else {
        j.at("direction").fail("expected \"Left\" or \"Right\", found '" + dir + "'");
    }
    if (j.find("pad_to_multiple_of")) p.pad_to_multiple_of = j.at("pad_to_multiple_of").as_uint(UINT32_MAX);
    p.pad_id = static_cast<uint32_t>(j.get_uint("pad_id", 0));
    p.pad_type_id = static_cast<uint32_t>(j.get_uint("pad_type_id", 0));
    p.pad_token = j.get_string("pad_token", "[PAD]");
    return p;
}

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& name) {
    Json root;
    try {
        root = Json::parse(json_text.begin(), json_text.end());
    } catch (const Json::exception& e) {
        // parse_error, and out_of_range for numbers past double's range.
        throw TokenizerError(name + ": invalid JSON: " + e.what());
    }
    const JsonAt r{root, "", name};
    r.require_object();
    if (r.find("version") && r.at("version").as_string() != "1.0")
        r.at("version").fail("unknown tokenizer version '" + r.at("version").as_string() + "' (expected \"1.0\")");
    Parts parts;
    if (!r.find("model")) r.fail("missing required field 'model'");
    parts.model = model_from_json(r.at("model"));
    if (r.find("normalizer")) parts.normalizer = normalizer_from_json(r.at("normalizer"));
    if (r.find("pre_tokenizer")) parts.pre_tokenizer = pre_tokenizer_from_json(r.at("pre_tokenizer"));
    if (r.find("post_processor")) parts.post_processor = post_processor_from_json(r.at("post_processor"));
    if (r.find("decoder")) parts.decoder = decoder_from_json(r.at("decoder"));
    if (r.find("added_tokens")) parts.added_tokens = added_tokens_from_json(r.at("added_tokens"));
    if (r.find("truncation")) parts.truncation = truncation_from_json(r.at("truncation"));
    if (r.find("padding")) parts.padding = padding_from_json(r.at("padding"));
    Tokenizer tok(std::move(parts));
    if (r.find("post_processor")) check_post_processor_ids(r.at("post_processor"), tok);
    return tok;
}

Tokenizer Tokenizer::from_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw TokenizerError(path + ": cannot open file");
    std::ostringstream ss;
    ss << in.rdbuf();
    return from_json(ss.str(), path);
}

}  // namespace loom::tokenizer
