// Tokenization models: one word (a pre-tokenizer piece, already normalized)
// in, tokens with byte offsets inside that word out.
//
// WordPiece, BPE and Unigram are ports of HF tokenizers v0.22.2
// (models/{wordpiece,bpe,unigram}). Models are immutable after construction
// and safe to share between threads; BPE keeps a per-thread word cache.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/encoding.h"
#include "tokenizer/flat_map.h"

namespace loom::tokenizer {

// Hash that lets unordered_map<std::string, T> be searched with a string_view.
struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept {
        // FNV-1a, 64-bit: short keys dominate (tokens), so a simple hash wins.
        uint64_t h = 1469598103934665603ull;
        for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
        return static_cast<size_t>(h ^ (h >> 29));
    }
};
using Vocab = std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>>;

class Model {
public:
    virtual ~Model() = default;
    // Appends the tokens of `word` to `out`.
    virtual void tokenize(std::string_view word, std::vector<Token>& out) const = 0;
    virtual std::optional<uint32_t> token_to_id(std::string_view token) const = 0;
    // nullptr when the id is not in the vocabulary.
    virtual const std::string* id_to_token(uint32_t id) const = 0;
    virtual size_t vocab_size() const = 0;
};

class WordPiece final : public Model {
public:
    WordPiece(Vocab vocab, std::string unk_token, std::string continuing_subword_prefix,
              size_t max_input_chars_per_word);
    void tokenize(std::string_view word, std::vector<Token>& out) const override;
    std::optional<uint32_t> token_to_id(std::string_view token) const override;
    const std::string* id_to_token(uint32_t id) const override;
    size_t vocab_size() const override { return vocab_.size(); }

private:
    void push_unk(std::string_view word, std::vector<Token>& out) const;
    Vocab vocab_;
    FlatStringMap<uint32_t> lookup_;  // the same as vocab_, for the hot path
    std::unordered_map<uint32_t, std::string> vocab_r_;
    std::string unk_token_;
    std::string prefix_;
    size_t max_input_chars_per_word_;
};

struct BpeOptions {
    std::optional<std::string> unk_token;
    std::optional<std::string> continuing_subword_prefix;
    std::optional<std::string> end_of_word_suffix;
    bool fuse_unk = false;
    bool byte_fallback = false;
    bool ignore_merges = false;
};

class Bpe final : public Model {
public:
    // merges[i] = (left, right) of rank i. Throws TokenizerError naming the
    // merge index when a merge refers to a token missing from the vocabulary
    // (message: "merges/<i>: ...").
    Bpe(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options);
    void tokenize(std::string_view word, std::vector<Token>& out) const override;
    std::optional<uint32_t> token_to_id(std::string_view token) const override;
    const std::string* id_to_token(uint32_t id) const override;
    size_t vocab_size() const override { return vocab_.size(); }

    // (symbol id, byte length) pairs of a merged word.
    using Word = std::vector<std::pair<uint32_t, uint32_t>>;

private:
    void merge_word(std::string_view w, Word& word) const;
    void merge_all(Word& word) const;
    Vocab vocab_;
    FlatStringMap<uint32_t> lookup_;  // the same as vocab_, for the hot path
    std::unordered_map<uint32_t, std::string> vocab_r_;
    // (left id << 32 | right id) -> (rank, merged id)
    std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> merges_;
    BpeOptions opt_;
    uint64_t cache_key_;  // identifies this model in the per-thread cache
};

class Unigram final : public Model {
public:
    Unigram(std::vector<std::pair<std::string, double>> vocab, std::optional<size_t> unk_id, bool byte_fallback);
    void tokenize(std::string_view word, std::vector<Token>& out) const override;
    std::optional<uint32_t> token_to_id(std::string_view token) const override;
    const std::string* id_to_token(uint32_t id) const override;
    size_t vocab_size() const override { return vocab_.size(); }

private:
    struct TrieNode {
        std::vector<std::pair<unsigned char, uint32_t>> children;
        int64_t id = -1;  // vocabulary id when a piece ends here
    };
    void encode(std::string_view s, std::vector<std::string_view>& pieces) const;
    std::vector<std::pair<std::string, double>> vocab_;
    Vocab token_to_id_;
    std::vector<TrieNode> trie_;
    double min_score_ = 0;
    std::optional<size_t> unk_id_;
    bool byte_fallback_;
};

}  // namespace loom::tokenizer
