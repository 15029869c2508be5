// PreTokenizedString: the input split into pieces (words), each a
// NormalizedString that still knows its place in the original text, plus the
// tokens once the model has run. Port of HF tokenizers' PreTokenizedString.
//
// Pieces that already carry tokens (added tokens found in the text) are never
// split or normalized again. Empty pieces are dropped after every split, so
// word indices count only non-empty pieces.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tokenizer/encoding.h"
#include "tokenizer/normalized_string.h"

namespace loom::tokenizer {

struct Split {
    NormalizedString normalized;
    std::optional<std::vector<Token>> tokens;
};

class PreTokenizedString {
public:
    PreTokenizedString() = default;
    explicit PreTokenizedString(NormalizedString n);

    std::vector<Split>& splits() { return splits_; }
    const std::vector<Split>& splits() const { return splits_; }
    const std::string& original() const { return original_; }

    // Replaces every untokenized piece by what fn(index, piece, out) appends to out.
    template <class Fn>
    void split(Fn fn);
    // Runs fn(NormalizedString&) on every untokenized piece.
    template <class Fn>
    void normalize(Fn fn) {
        for (Split& s : splits_)
            if (!s.tokens) fn(s.normalized);
    }

    // Builds the encoding of the tokenized pieces. word_idx >= 0 forces one
    // word index for every token (pre-tokenized input); otherwise the piece
    // index is the word index.
    // Consumes the tokens.
    Encoding into_encoding(int64_t word_idx, uint32_t type_id);

private:
    std::string original_;
    std::vector<Split> splits_;
};

template <class Fn>
void PreTokenizedString::split(Fn fn) {
    std::vector<Split> out;
    out.reserve(splits_.size() * 4);
    for (size_t i = 0; i < splits_.size(); ++i) {
        Split& s = splits_[i];
        if (s.tokens) {
            out.push_back(std::move(s));
            continue;
        }
        const size_t first = out.size();
        fn(i, std::move(s.normalized), out);
        // Drop the empty pieces the function produced.
        size_t w = first;
        for (size_t r = first; r < out.size(); ++r) {
            if (out[r].normalized.empty()) continue;
            if (w != r) out[w] = std::move(out[r]);
            ++w;
        }
        out.resize(w);
    }
    splits_ = std::move(out);
}

// Emitter appending untokenized pieces to a split list.
struct AppendSplits {
    std::vector<Split>& out;
    void operator()(NormalizedString&& n) const { out.push_back(Split{std::move(n), std::nullopt}); }
};

// Wraps NormalizedStrings as untokenized splits.
std::vector<Split> as_splits(std::vector<NormalizedString>&& pieces);

}  // namespace loom::tokenizer
