// WordPiece: greedy longest-match-first over the vocabulary, continuation
// pieces prefixed (usually "##"); a word that cannot be fully covered, or is
// longer than max_input_chars_per_word code points, becomes one unk token.
#include "tokenizer/error.h"
#include "tokenizer/model.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {

WordPiece::WordPiece(Vocab vocab, std::string unk_token, std::string continuing_subword_prefix,
                     size_t max_input_chars_per_word)
    : vocab_(std::move(vocab)),
      unk_token_(std::move(unk_token)),
      prefix_(std::move(continuing_subword_prefix)),
      max_input_chars_per_word_(max_input_chars_per_word) {
    for (const auto& [tok, id] : vocab_) {
        vocab_r_[id] = tok;
        lookup_.insert(tok, id);
    }
}

void WordPiece::push_unk(std::string_view word, std::vector<Token>& out) const {
    const auto it = vocab_.find(unk_token_);
    if (it == vocab_.end())
        throw TokenizerError("WordPiece: unk_token '" + unk_token_ + "' is not in the vocabulary");
    out.push_back(Token{it->second, unk_token_, {0, word.size()}});
}

void WordPiece::tokenize(std::string_view word, std::vector<Token>& out) const {
    if (utf8_char_count(word) > max_input_chars_per_word_) {
        push_unk(word, out);
        return;
    }
    const size_t first_out = out.size();
    std::string candidate;
    candidate.reserve(prefix_.size() + word.size());
    size_t start = 0;
    while (start < word.size()) {
        size_t end = word.size();
        bool found = false;
        while (start < end) {
            candidate.clear();
            if (start > 0) candidate.append(prefix_);
            candidate.append(word.substr(start, end - start));
            if (const uint32_t* id = lookup_.find(candidate)) {
                out.push_back(Token{*id, candidate, {start, end}});
                found = true;
                break;
            }
            // Drop the last char of the candidate (of the prefix, if only it is left).
            size_t back = candidate.size() - 1;
            while (back > 0 && (static_cast<unsigned char>(candidate[back]) & 0xC0) == 0x80) --back;
            const size_t last_len = candidate.size() - back;
            end = end >= last_len ? end - last_len : 0;
        }
        if (!found) {
            out.resize(first_out);
            push_unk(word, out);
            return;
        }
        start = end;
    }
}

std::optional<uint32_t> WordPiece::token_to_id(std::string_view token) const {
    const auto it = vocab_.find(token);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
}

const std::string* WordPiece::id_to_token(uint32_t id) const {
    const auto it = vocab_r_.find(id);
    return it == vocab_r_.end() ? nullptr : &it->second;
}

}  // namespace loom::tokenizer
