// Tokenizer: loads any Hugging Face tokenizer.json and encodes text exactly as
// HF tokenizers 0.22.2 does (ids, tokens, offsets, masks, word and sequence
// ids, truncation with overflow, padding) and decodes ids back to text.
//
// Pipeline per input: added tokens -> normalizer -> pre-tokenizer -> model,
// then truncation -> post-processor (special tokens) -> padding.
// Invalid UTF-8 input is not an error: it is first replaced the way Rust's
// String::from_utf8_lossy does (each maximal invalid sequence becomes U+FFFD),
// and all offsets refer to that repaired text.
// A Tokenizer is immutable once loaded except for set_truncation/set_padding;
// encode/decode are safe to call from many threads at once.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/encoding.h"
#include "tokenizer/error.h"

namespace loom::tokenizer {

class Model;
class Normalizer;
class PreTokenizer;
class PostProcessor;
class Decoder;

enum class TruncationStrategy { LongestFirst, OnlyFirst, OnlySecond };

struct TruncationParams {
    TruncationDirection direction = TruncationDirection::Right;
    size_t max_length = 512;
    TruncationStrategy strategy = TruncationStrategy::LongestFirst;
    size_t stride = 0;
};

struct PaddingParams {
    bool batch_longest = true;  // false: pad to fixed_length
    size_t fixed_length = 0;
    PaddingDirection direction = PaddingDirection::Right;
    std::optional<size_t> pad_to_multiple_of;
    uint32_t pad_id = 0;
    uint32_t pad_type_id = 0;
    std::string pad_token = "[PAD]";
};

// One input of encode_batch.
struct EncodeInput {
    std::string text;
    std::optional<std::string> pair;
};

class Tokenizer {
public:
    Tokenizer();
    ~Tokenizer();
    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;

    // Errors name the file and JSON path: "tokenizer.json: /model/merges/17: ...".
    static Tokenizer from_file(const std::string& path);
    static Tokenizer from_json(std::string_view json_text, const std::string& name = "tokenizer.json");

    Encoding encode(std::string_view text, bool add_special_tokens = true) const;
    Encoding encode(std::string_view text, std::optional<std::string_view> pair, bool add_special_tokens) const;
    // The same with explicit truncation/padding instead of the tokenizer's own
    // (for callers that vary them per input, from many threads).
    Encoding encode_with(std::string_view text, std::optional<std::string_view> pair, bool add_special_tokens,
                         const std::optional<TruncationParams>& truncation,
                         const std::optional<PaddingParams>& padding) const;
    // Encodes on all cores (OpenMP); n_threads <= 0 uses the OpenMP default.
    // With BatchLongest padding, pads every encoding to the longest one.
    std::vector<Encoding> encode_batch(const std::vector<EncodeInput>& inputs, bool add_special_tokens,
                                       int n_threads = 0) const;
    std::vector<Encoding> encode_batch(const std::vector<std::string>& texts, bool add_special_tokens,
                                       int n_threads = 0) const;

    std::string decode(const std::vector<uint32_t>& ids, bool skip_special_tokens) const;

    std::optional<uint32_t> token_to_id(std::string_view token) const;
    std::optional<std::string> id_to_token(uint32_t id) const;
    // Model vocabulary, plus added tokens when with_added.
    size_t vocab_size(bool with_added = true) const;

    const std::optional<TruncationParams>& truncation() const { return truncation_; }
    const std::optional<PaddingParams>& padding() const { return padding_; }
    void set_truncation(std::optional<TruncationParams> t) { truncation_ = std::move(t); }
    void set_padding(std::optional<PaddingParams> p) { padding_ = std::move(p); }

    // Used by the loader.
    struct Parts;
    explicit Tokenizer(Parts&& parts);

private:
    Encoding encode_single(std::string_view text, uint32_t type_id) const;
    Encoding post_process(Encoding encoding, std::optional<Encoding> pair, bool add_special_tokens,
                          const std::optional<TruncationParams>& truncation,
                          const std::optional<PaddingParams>& padding) const;
    void pad_batch(std::vector<Encoding>& encodings) const;

    std::unique_ptr<Normalizer> normalizer_;
    std::unique_ptr<PreTokenizer> pre_tokenizer_;
    std::unique_ptr<Model> model_;
    std::unique_ptr<PostProcessor> post_processor_;
    std::unique_ptr<Decoder> decoder_;
    AddedVocabulary added_;
    std::optional<TruncationParams> truncation_;
    std::optional<PaddingParams> padding_;
};

struct Tokenizer::Parts {
    std::unique_ptr<Normalizer> normalizer;
    std::unique_ptr<PreTokenizer> pre_tokenizer;
    std::unique_ptr<Model> model;
    std::unique_ptr<PostProcessor> post_processor;
    std::unique_ptr<Decoder> decoder;
    std::vector<AddedToken> added_tokens;
    std::optional<TruncationParams> truncation;
    std::optional<PaddingParams> padding;
};

}  // namespace loom::tokenizer
