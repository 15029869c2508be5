// The pipeline stages around the model: normalizers, pre-tokenizers,
// post-processors and decoders, each an interface plus the HF types it
// implements (constructed by the tokenizer.json loader).
//
// Every concrete type is a port of the same-named type in HF tokenizers
// v0.22.2; comments note where behaviour is surprising but kept for parity.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/encoding.h"
#include "tokenizer/normalized_string.h"
#include "tokenizer/pre_tokenized.h"
#include "tokenizer/regex.h"

namespace loom::tokenizer {

// --- normalizers -------------------------------------------------------------
class Normalizer {
public:
    virtual ~Normalizer() = default;
    virtual void normalize(NormalizedString& s) const = 0;
};

struct BertNormalizer final : Normalizer {
    bool clean_text = true;
    bool handle_chinese_chars = true;
    std::optional<bool> strip_accents;  // null: follow `lowercase`
    bool lowercase = true;
    void normalize(NormalizedString& s) const override;
};

enum class UnicodeForm { NFD, NFKD, NFC, NFKC };
struct UnicodeNormalizer final : Normalizer {
    UnicodeForm form;
    explicit UnicodeNormalizer(UnicodeForm f) : form(f) {}
    void normalize(NormalizedString& s) const override;
};

struct LowercaseNormalizer final : Normalizer {
    void normalize(NormalizedString& s) const override { s.lowercase(); }
};

struct StripAccentsNormalizer final : Normalizer {
    void normalize(NormalizedString& s) const override;
};

struct StripNormalizer final : Normalizer {
    bool left = true;
    bool right = true;
    void normalize(NormalizedString& s) const override;
};

struct PrependNormalizer final : Normalizer {
    std::string prepend;
    void normalize(NormalizedString& s) const override {
        if (!s.empty()) s.prepend(prepend);
    }
};

// A string pattern (matched literally) or a regex, as HF's Replace/Split patterns.
struct Pattern {
    std::string literal;           // used when regex is null
    std::shared_ptr<Regex> regex;  // set for {"Regex": ...}
    std::vector<Match> find_matches(std::string_view s) const {
        return regex ? regex->find_matches(s) : find_literal_matches(s, literal);
    }
};

struct ReplaceNormalizer final : Normalizer {
    Pattern pattern;
    std::string content;
    void normalize(NormalizedString& s) const override { s.replace(pattern.find_matches(s.get()), content); }
};

struct ByteLevelNormalizer final : Normalizer {
    void normalize(NormalizedString& s) const override;
};

struct NmtNormalizer final : Normalizer {
    void normalize(NormalizedString& s) const override;
};

// sentencepiece's compiled normalization rules (HF's Precompiled, which uses
// the spm_precompiled crate). The charsmap is a darts-clone double-array trie
// over UTF-8 keys whose leaf values are byte offsets of NUL-terminated
// replacements in `replacements`. Built by precompiled.cpp from the blob.
struct PrecompiledNormalizer final : Normalizer {
    std::vector<uint32_t> trie;  // (trie_size / 4) double-array units
    std::string replacements;    // NUL-separated UTF-8 replacement strings
    // Parses the decoded precompiled_charsmap bytes; throws TokenizerError
    // naming `where` when the blob is malformed.
    static PrecompiledNormalizer from_charsmap(std::string_view blob, const std::string& where);
    // The replacement of the *shortest* prefix of `chunk` found in the trie
    // (spm_precompiled takes the first common-prefix result), or nullopt.
    std::optional<std::string_view> transform(std::string_view chunk) const;
    void normalize(NormalizedString& s) const override;
};

struct SequenceNormalizer final : Normalizer {
    std::vector<std::unique_ptr<Normalizer>> normalizers;
    void normalize(NormalizedString& s) const override {
        for (const auto& n : normalizers) n->normalize(s);
    }
};

// --- pre-tokenizers ----------------------------------------------------------
class PreTokenizer {
public:
    virtual ~PreTokenizer() = default;
    virtual void pre_tokenize(PreTokenizedString& s) const = 0;
};

struct BertPreTokenizer final : PreTokenizer {
    void pre_tokenize(PreTokenizedString& s) const override;
};

struct ByteLevelPreTokenizer final : PreTokenizer {
    bool add_prefix_space = true;
    bool use_regex = true;
    void pre_tokenize(PreTokenizedString& s) const override;
};

enum class PrependScheme { First, Never, Always };
struct MetaspacePreTokenizer final : PreTokenizer {
    std::string replacement = "\xE2\x96\x81";  // U+2581
    char32_t replacement_char = 0x2581;
    PrependScheme prepend_scheme = PrependScheme::Always;
    bool split = true;
    void pre_tokenize(PreTokenizedString& s) const override;
};

struct WhitespacePreTokenizer final : PreTokenizer {
    void pre_tokenize(PreTokenizedString& s) const override;
};

struct WhitespaceSplitPreTokenizer final : PreTokenizer {
    void pre_tokenize(PreTokenizedString& s) const override;
};

struct PunctuationPreTokenizer final : PreTokenizer {
    SplitBehavior behavior = SplitBehavior::Isolated;
    void pre_tokenize(PreTokenizedString& s) const override;
};

struct DigitsPreTokenizer final : PreTokenizer {
    bool individual_digits = false;
    void pre_tokenize(PreTokenizedString& s) const override;
};

struct CharDelimiterSplitPreTokenizer final : PreTokenizer {
    char32_t delimiter = ' ';
    void pre_tokenize(PreTokenizedString& s) const override;
};

struct SplitPreTokenizer final : PreTokenizer {
    Pattern pattern;
    SplitBehavior behavior = SplitBehavior::Removed;
    bool invert = false;
    void pre_tokenize(PreTokenizedString& s) const override;
};

struct SequencePreTokenizer final : PreTokenizer {
    std::vector<std::unique_ptr<PreTokenizer>> pre_tokenizers;
    void pre_tokenize(PreTokenizedString& s) const override {
        for (const auto& p : pre_tokenizers) p->pre_tokenize(s);
    }
};

// GPT-2's pre-tokenization regex, hand-written (byte ranges of the matches).
// Pattern: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
std::vector<Match> gpt2_find_matches(std::string_view s);

// The byte -> printable char table of GPT-2's byte-level BPE.
const char32_t* byte_level_chars();  // [256]
// Reverse of byte_level_chars(): byte value, or -1 for chars outside the table.
int byte_level_byte(char32_t c);

// --- post-processors -----------------------------------------------------------
class PostProcessor {
public:
    virtual ~PostProcessor() = default;
    virtual size_t added_tokens(bool is_pair) const = 0;
    // encodings: 1 or 2 entries (sequence, pair); processed in place.
    virtual void process_encodings(std::vector<Encoding>& encodings, bool add_special_tokens) const = 0;
};

struct BertProcessing final : PostProcessor {
    std::string sep_token = "[SEP]";
    uint32_t sep_id = 102;
    std::string cls_token = "[CLS]";
    uint32_t cls_id = 101;
    size_t added_tokens(bool is_pair) const override { return is_pair ? 3 : 2; }
    void process_encodings(std::vector<Encoding>& encodings, bool add_special_tokens) const override;
};

struct RobertaProcessing final : PostProcessor {
    std::string sep_token = "</s>";
    uint32_t sep_id = 2;
    std::string cls_token = "<s>";
    uint32_t cls_id = 0;
    bool trim_offsets = true;
    bool add_prefix_space = true;
    size_t added_tokens(bool is_pair) const override { return is_pair ? 4 : 2; }
    void process_encodings(std::vector<Encoding>& encodings, bool add_special_tokens) const override;
};

struct ByteLevelProcessing final : PostProcessor {
    bool add_prefix_space = true;
    bool trim_offsets = true;
    size_t added_tokens(bool) const override { return 0; }
    void process_encodings(std::vector<Encoding>& encodings, bool add_special_tokens) const override;
};

struct TemplatePiece {
    bool is_sequence = false;  // $A / $B
    size_t sequence = 0;       // 0 = A, 1 = B
    std::string special_id;    // for special tokens
    uint32_t type_id = 0;
};
struct TemplateSpecialToken {
    std::string id;
    std::vector<uint32_t> ids;
    std::vector<std::string> tokens;
};
struct TemplateProcessing final : PostProcessor {
    std::vector<TemplatePiece> single;
    std::vector<TemplatePiece> pair;
    std::vector<TemplateSpecialToken> special_tokens;
    size_t added_single = 0;
    size_t added_pair = 0;
    const TemplateSpecialToken* find_special(const std::string& id) const;
    size_t added_tokens(bool is_pair) const override { return is_pair ? added_pair : added_single; }
    void process_encodings(std::vector<Encoding>& encodings, bool add_special_tokens) const override;
};

struct SequenceProcessing final : PostProcessor {
    std::vector<std::unique_ptr<PostProcessor>> processors;
    size_t added_tokens(bool is_pair) const override {
        size_t n = 0;
        for (const auto& p : processors) n += p->added_tokens(is_pair);
        return n;
    }
    void process_encodings(std::vector<Encoding>& encodings, bool add_special_tokens) const override {
        for (const auto& p : processors) p->process_encodings(encodings, add_special_tokens);
    }
};

// HF's byte-level offset trimming (shared by ByteLevel and Roberta processing).
void byte_level_process_offsets(Encoding& e, bool add_prefix_space);

// --- decoders -------------------------------------------------------------------
class Decoder {
public:
    virtual ~Decoder() = default;
    virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

struct WordPieceDecoder final : Decoder {
    std::string prefix = "##";
    bool cleanup = true;
    void decode_chain(std::vector<std::string>& tokens) const override;
};
struct ByteLevelDecoder final : Decoder {
    void decode_chain(std::vector<std::string>& tokens) const override;
};
struct MetaspaceDecoder final : Decoder {
    char32_t replacement = 0x2581;
    PrependScheme prepend_scheme = PrependScheme::Always;
    void decode_chain(std::vector<std::string>& tokens) const override;
};
struct BpeDecoder final : Decoder {
    std::string suffix = "</w>";
    void decode_chain(std::vector<std::string>& tokens) const override;
};
struct ByteFallbackDecoder final : Decoder {
    void decode_chain(std::vector<std::string>& tokens) const override;
};
struct FuseDecoder final : Decoder {
    void decode_chain(std::vector<std::string>& tokens) const override;
};
struct StripDecoder final : Decoder {
    char32_t content = ' ';
    size_t start = 0;
    size_t stop = 0;
    void decode_chain(std::vector<std::string>& tokens) const override;
};
struct ReplaceDecoder final : Decoder {
    Pattern pattern;
    std::string content;
    void decode_chain(std::vector<std::string>& tokens) const override;
};
struct CtcDecoder final : Decoder {
    std::string pad_token = "<pad>";
    std::string word_delimiter_token = "|";
    bool cleanup = true;
    void decode_chain(std::vector<std::string>& tokens) const override;
};
struct SequenceDecoder final : Decoder {
    std::vector<std::unique_ptr<Decoder>> decoders;
    void decode_chain(std::vector<std::string>& tokens) const override {
        for (const auto& d : decoders) d->decode_chain(tokens);
    }
};

// WordPiece decoder's cleanup (also used by CTC).
std::string wordpiece_cleanup(std::string s);

}  // namespace loom::tokenizer
