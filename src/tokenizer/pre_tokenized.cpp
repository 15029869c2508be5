// PreTokenizedString -> Encoding, with byte and code-point offsets.
#include "tokenizer/pre_tokenized.h"

#include "tokenizer/error.h"

namespace loom::tokenizer {

PreTokenizedString::PreTokenizedString(NormalizedString n) : original_(n.original()) {
    splits_.push_back({std::move(n), std::nullopt});
}

std::vector<Split> as_splits(std::vector<NormalizedString>&& pieces) {
    std::vector<Split> out;
    out.reserve(pieces.size());
    for (auto& p : pieces) out.push_back({std::move(p), std::nullopt});
    return out;
}

Encoding PreTokenizedString::into_encoding(int64_t word_idx, uint32_t type_id) {
    Encoding enc;
    if (splits_.empty()) return enc;
    size_t n = 0;
    for (const Split& s : splits_) {
        if (!s.tokens) throw TokenizerError("internal error: split has not been tokenized");
        n += s.tokens->size();
    }
    enc.reserve(n);
    // Byte -> code point index of the original input (HF's BytesToCharOffsetConverter).
    std::vector<uint32_t> char_of_byte(original_.size());
    {
        uint32_t ci = 0;
        for (size_t b = 0; b < original_.size(); ++b) {
            if (b > 0 && (static_cast<unsigned char>(original_[b]) & 0xC0) != 0x80) ++ci;
            char_of_byte[b] = ci;
        }
    }
    auto to_chars = [&](Offsets o) -> Offsets {
        if (o.start >= char_of_byte.size()) return o;  // not convertible: keep bytes
        const size_t s = char_of_byte[o.start];
        if (o.end < char_of_byte.size()) return {s, char_of_byte[o.end]};
        const size_t last = (o.end >= 1 && o.end - 1 < char_of_byte.size()) ? char_of_byte[o.end - 1] : s + 1;
        return {s, last + 1};
    };
    for (size_t idx = 0; idx < splits_.size(); ++idx) {
        Split& s = splits_[idx];
        const size_t shift = s.normalized.offsets_original().start;
        const int64_t word = word_idx >= 0 ? word_idx : static_cast<int64_t>(idx);
        for (Token& t : *s.tokens) {
            Offsets bytes = t.offsets;
            if (auto r = s.normalized.normalized_to_original(t.offsets.start, t.offsets.end))
                bytes = {shift + r->start, shift + r->end};
            enc.push_back(t.id, std::move(t.value), to_chars(bytes), bytes, word, type_id, 0, 1);
        }
    }
    return enc;
}

}  // namespace loom::tokenizer
