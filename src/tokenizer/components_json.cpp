// tokenizer.json sections "normalizer", "pre_tokenizer", "post_processor" and
// "decoder": one factory each, dispatching on "type" as HF's serde does.
#include "tokenizer/components.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {
namespace {

Pattern pattern_from_json(const JsonAt& j) {
    j.require_object();
    Pattern p;
    if (j.find("String")) {
        p.literal = j.at("String").as_string();
        // An empty literal compiles to an empty regex in HF (matches everywhere).
        if (p.literal.empty()) p.regex = std::make_shared<Regex>("");
    } else if (j.find("Regex")) {
        const JsonAt r = j.at("Regex");
        try {
            p.regex = std::make_shared<Regex>(r.as_string());
        } catch (const TokenizerError& e) {
            r.fail(e.what());
        }
    } else {
        j.fail("expected {\"String\": ...} or {\"Regex\": ...}");
    }
    return p;
}

SplitBehavior behavior_from_json(const JsonAt& j) {
    const std::string b = j.as_string();
    if (b == "Removed") return SplitBehavior::Removed;
    if (b == "Isolated") return SplitBehavior::Isolated;
    if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
    if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
    if (b == "Contiguous") return SplitBehavior::Contiguous;
    j.fail("unknown split behavior '" + b +
           "' (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

char32_t single_char(const JsonAt& j) {
    const std::string s = j.as_string();
    if (s.empty() || !utf8_is_valid(s) || utf8_char_count(s) != 1) j.fail("expected a single character");
    size_t len;
    return utf8_decode(s, 0, len);
}

PrependScheme prepend_scheme_from_json(const JsonAt& j, const std::string& fallback) {
    const std::string s = j.get_string("prepend_scheme", fallback);
    PrependScheme scheme;
    if (s == "always") {
        scheme = PrependScheme::Always;
    } else if (s == "first") {
        scheme = PrependScheme::First;
    } else if (s == "never") {
        scheme = PrependScheme::Never;
    } else {
        j.at("prepend_scheme").fail("expected \"always\", \"first\" or \"never\", found '" + s + "'");
    }
    if (j.find("add_prefix_space") && !j.at("add_prefix_space").as_bool()) {
        if (scheme != PrependScheme::Never && j.find("prepend_scheme"))
            j.fail("add_prefix_space does not match declared prepend_scheme");
        scheme = PrependScheme::Never;
    }
    return scheme;
}

std::string required_type(const JsonAt& j, const char* what) {
    j.require_object();
    if (!j.find("type")) j.fail(std::string(what) + " has no \"type\"");
    return j.at("type").as_string();
}

std::pair<std::string, uint32_t> token_pair(const JsonAt& j) {
    if (!j.j.is_array() || j.j.size() != 2) j.fail("expected a [token, id] pair");
    return {j.at(size_t{0}).as_string(), static_cast<uint32_t>(j.at(size_t{1}).as_uint())};
}

std::vector<TemplatePiece> template_from_json(const JsonAt& j) {
    j.require_array();
    std::vector<TemplatePiece> out;
    for (size_t i = 0; i < j.j.size(); ++i) {
        const JsonAt p = j.at(i);
        TemplatePiece piece;
        if (p.j.is_object() && p.find("Sequence")) {
            const JsonAt s = p.at("Sequence");
            const std::string id = s.at("id").as_string();
            if (id != "A" && id != "B") s.at("id").fail("expected \"A\" or \"B\", found '" + id + "'");
            piece.is_sequence = true;
            piece.sequence = id == "A" ? 0 : 1;
            piece.type_id = static_cast<uint32_t>(s.get_uint("type_id", 0));
        } else if (p.j.is_object() && p.find("SpecialToken")) {
            const JsonAt s = p.at("SpecialToken");
            piece.special_id = s.at("id").as_string();
            piece.type_id = static_cast<uint32_t>(s.get_uint("type_id", 0));
        } else {
            p.fail("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
        }
        out.push_back(std::move(piece));
    }
    return out;
}

std::unique_ptr<PostProcessor> template_processing_from_json(const JsonAt& j) {
    auto t = std::make_unique<TemplateProcessing>();
    if (j.find("special_tokens")) {
        const JsonAt st = j.at("special_tokens");
        st.require_object();
        for (auto it = st.j.begin(); it != st.j.end(); ++it) {
            const JsonAt e = st.at(it.key());
            TemplateSpecialToken tok;
            tok.id = e.at("id").as_string();
            const JsonAt ids = e.at("ids");
            const JsonAt toks = e.at("tokens");
            ids.require_array();
            toks.require_array();
            for (size_t i = 0; i < ids.j.size(); ++i) tok.ids.push_back(static_cast<uint32_t>(ids.at(i).as_uint()));
            for (size_t i = 0; i < toks.j.size(); ++i) tok.tokens.push_back(toks.at(i).as_string());
            if (tok.ids.size() != tok.tokens.size()) e.fail("ids and tokens must have the same length");
            t->special_tokens.push_back(std::move(tok));
        }
    }
    t->single = template_from_json(j.at("single"));
    t->pair = template_from_json(j.at("pair"));
    bool has_a = false, has_b = false;
    for (const auto& p : t->pair) {
        has_a |= p.is_sequence && p.sequence == 0;
        has_b |= p.is_sequence && p.sequence == 1;
    }
    if (!has_a || !has_b) j.at("pair").fail("template for `pair` must use both sequences $A and $B");
    auto count = [&](const std::vector<TemplatePiece>& tmpl, const char* key) {
        size_t n = 0;
        for (size_t i = 0; i < tmpl.size(); ++i) {
            if (tmpl[i].is_sequence) continue;
            const TemplateSpecialToken* s = t->find_special(tmpl[i].special_id);
            if (!s) j.at(key).at(i).fail("special token '" + tmpl[i].special_id + "' is missing from special_tokens");
            n += s->ids.size();
        }
        return n;
    };
    t->added_single = count(t->single, "single");
    t->added_pair = count(t->pair, "pair");
    return t;
}

}  // namespace

std::unique_ptr<Normalizer> normalizer_from_json(const JsonAt& j) {
    const std::string type = required_type(j, "normalizer");
    if (type == "BertNormalizer" || type == "Bert") {
        auto n = std::make_unique<BertNormalizer>();
        n->clean_text = j.get_bool("clean_text", true);
        n->handle_chinese_chars = j.get_bool("handle_chinese_chars", true);
        if (j.find("strip_accents")) n->strip_accents = j.at("strip_accents").as_bool();
        n->lowercase = j.get_bool("lowercase", true);
        return n;
    }
    if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
    if (type == "NFD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFD);
    if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFKD);
    if (type == "NFC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFC);
    if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFKC);
    if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
    if (type == "Nmt") return std::make_unique<NmtNormalizer>();
    if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
    if (type == "Strip") {
        auto n = std::make_unique<StripNormalizer>();
        n->left = j.get_bool("strip_left", true);
        n->right = j.get_bool("strip_right", true);
        return n;
    }
    if (type == "Replace") {
        auto n = std::make_unique<ReplaceNormalizer>();
        n->pattern = pattern_from_json(j.at("pattern"));
        n->content = j.at("content").as_string();
        return n;
    }
    if (type == "Prepend") {
        auto n = std::make_unique<PrependNormalizer>();
        n->prepend = j.at("prepend").as_string();
        return n;
    }
    if (type == "Sequence") {
        auto n = std::make_unique<SequenceNormalizer>();
        const JsonAt list = j.at("normalizers");
        list.require_array();
        for (size_t i = 0; i < list.j.size(); ++i) n->normalizers.push_back(normalizer_from_json(list.at(i)));
        return n;
    }
    if (type == "Precompiled") return precompiled_normalizer_from_json(j);
    j.at("type").fail("unknown normalizer type '" + type + "'");
}

std::unique_ptr<PreTokenizer> pre_tokenizer_from_json(const JsonAt& j) {
    const std::string type = required_type(j, "pre_tokenizer");
    if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
    if (type == "ByteLevel") {
        auto p = std::make_unique<ByteLevelPreTokenizer>();
        p->add_prefix_space = j.get_bool("add_prefix_space", true);
        p->use_regex = j.get_bool("use_regex", true);
        return p;
    }
    if (type == "Metaspace") {
        auto p = std::make_unique<MetaspacePreTokenizer>();
        p->replacement_char = single_char(j.at("replacement"));
        p->replacement.clear();
        utf8_append(p->replacement, p->replacement_char);
        p->prepend_scheme = prepend_scheme_from_json(j, "always");
        p->split = j.get_bool("split", true);
        return p;
    }
    if (type == "Whitespace") return std::make_unique<WhitespacePreTokenizer>();
    if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPreTokenizer>();
    if (type == "Punctuation") {
        auto p = std::make_unique<PunctuationPreTokenizer>();
        if (j.find("behavior")) p->behavior = behavior_from_json(j.at("behavior"));
        return p;
    }
    if (type == "Digits") {
        auto p = std::make_unique<DigitsPreTokenizer>();
        p->individual_digits = j.get_bool("individual_digits", false);
        return p;
    }
    if (type == "CharDelimiterSplit" || type == "Delimiter") {
        auto p = std::make_unique<CharDelimiterSplitPreTokenizer>();
        p->delimiter = single_char(j.at("delimiter"));
        return p;
    }
    if (type == "Split") {
        auto p = std::make_unique<SplitPreTokenizer>();
        p->pattern = pattern_from_json(j.at("pattern"));
        p->behavior = behavior_from_json(j.at("behavior"));
        p->invert = j.at("invert").as_bool();
        return p;
    }
    if (type == "Sequence") {
        auto p = std::make_unique<SequencePreTokenizer>();
        const JsonAt list = j.at("pretokenizers");
        list.require_array();
        for (size_t i = 0; i < list.j.size(); ++i) p->pre_tokenizers.push_back(pre_tokenizer_from_json(list.at(i)));
        return p;
    }
    j.at("type").fail("unsupported pre_tokenizer type '" + type + "'");
}

std::unique_ptr<PostProcessor> post_processor_from_json(const JsonAt& j) {
    const std::string type = required_type(j, "post_processor");
    if (type == "TemplateProcessing") return template_processing_from_json(j);
    if (type == "BertProcessing") {
        auto p = std::make_unique<BertProcessing>();
        std::tie(p->sep_token, p->sep_id) = token_pair(j.at("sep"));
        std::tie(p->cls_token, p->cls_id) = token_pair(j.at("cls"));
        return p;
    }
    if (type == "RobertaProcessing") {
        auto p = std::make_unique<RobertaProcessing>();
        std::tie(p->sep_token, p->sep_id) = token_pair(j.at("sep"));
        std::tie(p->cls_token, p->cls_id) = token_pair(j.at("cls"));
        p->trim_offsets = j.get_bool("trim_offsets", true);
        p->add_prefix_space = j.get_bool("add_prefix_space", true);
        return p;
    }
    if (type == "ByteLevel") {
        auto p = std::make_unique<ByteLevelProcessing>();
        p->add_prefix_space = j.get_bool("add_prefix_space", true);
        p->trim_offsets = j.get_bool("trim_offsets", true);
        return p;
    }
    if (type == "Sequence") {
        auto p = std::make_unique<SequenceProcessing>();
        const JsonAt list = j.at("processors");
        list.require_array();
        for (size_t i = 0; i < list.j.size(); ++i) p->processors.push_back(post_processor_from_json(list.at(i)));
        return p;
    }
    j.at("type").fail("unknown post_processor type '" + type + "'");
}

std::unique_ptr<Decoder> decoder_from_json(const JsonAt& j) {
    const std::string type = required_type(j, "decoder");
    if (type == "WordPiece") {
        auto d = std::make_unique<WordPieceDecoder>();
        d->prefix = j.get_string("prefix", "##");
        d->cleanup = j.get_bool("cleanup", true);
        return d;
    }
    if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
    if (type == "Metaspace") {
        auto d = std::make_unique<MetaspaceDecoder>();
        d->replacement = single_char(j.at("replacement"));
        d->prepend_scheme = prepend_scheme_from_json(j, "always");
        return d;
    }
    if (type == "BPEDecoder") {
        auto d = std::make_unique<BpeDecoder>();
        d->suffix = j.get_string("suffix", "</w>");
        return d;
    }
    if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
    if (type == "Fuse") return std::make_unique<FuseDecoder>();
    if (type == "Strip") {
        auto d = std::make_unique<StripDecoder>();
        d->content = single_char(j.at("content"));
        d->start = j.get_uint("start", 0);
        d->stop = j.get_uint("stop", 0);
        return d;
    }
    if (type == "Replace") {
        auto d = std::make_unique<ReplaceDecoder>();
        d->pattern = pattern_from_json(j.at("pattern"));
        d->content = j.at("content").as_string();
        return d;
    }
    if (type == "CTC") {
        auto d = std::make_unique<CtcDecoder>();
        d->pad_token = j.get_string("pad_token", "<pad>");
        d->word_delimiter_token = j.get_string("word_delimiter_token", "|");
        d->cleanup = j.get_bool("cleanup", true);
        return d;
    }
    if (type == "Sequence") {
        auto d = std::make_unique<SequenceDecoder>();
        const JsonAt list = j.at("decoders");
        list.require_array();
        for (size_t i = 0; i < list.j.size(); ++i) d->decoders.push_back(decoder_from_json(list.at(i)));
        return d;
    }
    j.at("type").fail("unknown decoder type '" + type + "'");
}

}  // namespace loom::tokenizer
