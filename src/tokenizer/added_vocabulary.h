// Added tokens (special or not) and how they are found in the input before
// the model runs. Port of HF tokenizers' AddedVocabulary (v0.22.2):
//   - tokens with normalized=false are matched in the raw input first;
//   - the remaining pieces are normalized, then tokens with normalized=true
//     are matched in the normalized text;
//   - matching is leftmost-longest and non-overlapping; single_word, lstrip
//     and rstrip then filter or widen each match.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/model.h"
#include "tokenizer/pre_tokenized.h"

namespace loom::tokenizer {

class Normalizer;

struct AddedToken {
    std::string content;
    bool single_word = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = true;
    bool special = false;
};

class AddedVocabulary {
public:
    // Registers tokens as HF's add_tokens does: a token already in the model
    // vocabulary keeps that id, others get ids after the model vocabulary.
    void add_tokens(const std::vector<AddedToken>& tokens, const Model& model, const Normalizer* normalizer);

    std::optional<uint32_t> token_to_id(std::string_view token, const Model& model) const;
    // The added token with this id, or nullptr.
    const AddedToken* find(uint32_t id) const;
    bool is_special(std::string_view content) const { return special_set_.count(std::string(content)) > 0; }
    size_t size() const { return by_content_.size(); }
    const std::unordered_map<uint32_t, AddedToken>& by_id() const { return by_id_; }

    PreTokenizedString extract_and_normalize(const Normalizer* normalizer, std::string_view sequence) const;

private:
    // Leftmost-longest literal matcher over a few patterns (a byte trie).
    struct Matcher {
        struct Node {
            std::vector<std::pair<unsigned char, uint32_t>> children;
            int64_t pattern = -1;
        };
        std::vector<Node> nodes;
        std::vector<uint32_t> ids;  // token id per pattern
        bool first_byte[256] = {};
        void build(const std::vector<std::string>& patterns, std::vector<uint32_t> token_ids);
        // (token id, start, end) of each match.
        struct Hit {
            uint32_t id;
            size_t start, end;
        };
        std::vector<Hit> find_all(std::string_view s) const;
    };
    void refresh(const Model& model, const Normalizer* normalizer);
    void split_with_indices(NormalizedString&& s, const Matcher& m, std::vector<Split>& out) const;

    std::unordered_map<std::string, uint32_t> by_content_;
    std::unordered_map<uint32_t, AddedToken> by_id_;
    std::vector<AddedToken> added_tokens_;    // non-special, in insertion order
    std::vector<AddedToken> special_tokens_;  // special, in insertion order
    std::unordered_set<std::string> special_set_;
    Matcher raw_matcher_;         // normalized == false
    Matcher normalized_matcher_;  // normalized == true, patterns normalized
};

}  // namespace loom::tokenizer
