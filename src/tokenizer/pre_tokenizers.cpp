// Pre-tokenizers (HF tokenizers pre_tokenizers/*.rs): split the normalized
// input into words, each keeping its alignment to the original text.
#include <array>

#include "tokenizer/components.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {
namespace {

bool is_bert_punc(char32_t c) { return is_ascii_punctuation(c) || is_punctuation(c); }

template <class Pred>
void split_by_char(PreTokenizedString& s, Pred pred, SplitBehavior behavior) {
    s.split([&](size_t, NormalizedString&& n, std::vector<Split>& out) {
        const std::vector<Match> m = find_char_matches(n.get(), pred);
        std::move(n).split_into(m, behavior, AppendSplits{out});
    });
}

// Rust regex `\w+|[^\w\s]+` (Unicode), the pattern of the Whitespace pre-tokenizer.
std::vector<Match> word_or_symbol_runs(std::string_view s) {
    std::vector<Match> out;
    if (s.empty()) {
        out.push_back({0, 0, false});
        return out;
    }
    size_t prev = 0, i = 0;
    while (i < s.size()) {
        size_t len;
        const char32_t c = utf8_decode(s, i, len);
        const bool word = is_word_char(c);
        if (!word && is_whitespace(c)) {
            i += len;
            continue;
        }
        size_t j = i + len;
        while (j < s.size()) {
            size_t l2;
            const char32_t d = utf8_decode(s, j, l2);
            const bool same = word ? is_word_char(d) : (!is_word_char(d) && !is_whitespace(d));
            if (!same) break;
            j += l2;
        }
        if (prev != i) out.push_back({prev, i, false});
        out.push_back({i, j, true});
        prev = i = j;
    }
    if (prev != s.size()) out.push_back({prev, s.size(), false});
    return out;
}

struct ByteTables {
    std::array<char32_t, 256> to_char{};
    std::array<int, 512> to_byte{};
    ByteTables() {
        to_byte.fill(-1);
        std::array<bool, 256> direct{};
        for (int b = '!'; b <= '~'; ++b) direct[b] = true;
        for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
        for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            to_char[b] = direct[b] ? char32_t(b) : char32_t(256 + n++);
            to_byte[to_char[b]] = b;
        }
    }
};
const ByteTables& byte_tables() {
    static const ByteTables t;
    return t;
}

}  // namespace

const char32_t* byte_level_chars() { return byte_tables().to_char.data(); }
int byte_level_byte(char32_t c) { return c < 512 ? byte_tables().to_byte[c] : -1; }

void BertPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
    split_by_char(s, [](char32_t c) { return is_whitespace(c); }, SplitBehavior::Removed);
    split_by_char(s, is_bert_punc, SplitBehavior::Isolated);
}

void WhitespacePreTokenizer::pre_tokenize(PreTokenizedString& s) const {
    s.split([](size_t, NormalizedString&& n, std::vector<Split>& out) {
        auto m = word_or_symbol_runs(n.get());
        invert_matches(m);
        std::move(n).split_into(m, SplitBehavior::Removed, AppendSplits{out});
    });
}

void WhitespaceSplitPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
    split_by_char(s, [](char32_t c) { return is_whitespace(c); }, SplitBehavior::Removed);
}

void PunctuationPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
    split_by_char(s, is_bert_punc, behavior);
}

void DigitsPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
    split_by_char(s, [](char32_t c) { return is_numeric(c); },
                  individual_digits ? SplitBehavior::Isolated : SplitBehavior::Contiguous);
}

void CharDelimiterSplitPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
    const char32_t d = delimiter;
    split_by_char(s, [d](char32_t c) { return c == d; }, SplitBehavior::Removed);
}

void SplitPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
    s.split([&](size_t, NormalizedString&& n, std::vector<Split>& out) {
        auto m = pattern.find_matches(n.get());
        if (invert) invert_matches(m);
        std::move(n).split_into(m, behavior, AppendSplits{out});
    });
}

void MetaspacePreTokenizer::pre_tokenize(PreTokenizedString& s) const {
    s.split([&](size_t, NormalizedString&& n, std::vector<Split>& out) {
        n.replace(find_char_matches(n.get(), [](char32_t c) { return c == U' '; }), replacement);
        const bool starts_with = n.get().compare(0, replacement.size(), replacement) == 0;
        switch (prepend_scheme) {
            case PrependScheme::Always:
                if (!starts_with) n.prepend(replacement);
                break;
            case PrependScheme::First:
                if (!starts_with && n.offsets_original().start == 0) n.prepend(replacement);
                break;
            case PrependScheme::Never: break;
        }
        if (!split) {
            out.push_back({std::move(n), std::nullopt});
            return;
        }
        const char32_t r = replacement_char;
        const std::vector<Match> m = find_char_matches(n.get(), [r](char32_t c) { return c == r; });
        std::move(n).split_into(m, SplitBehavior::MergedWithNext, AppendSplits{out});
    });
}

void ByteLevelPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
    s.split([&](size_t, NormalizedString&& n, std::vector<Split>& out) {
        if (add_prefix_space && (n.get().empty() || n.get()[0] != ' ')) n.prepend(" ");
        if (!use_regex) {
            out.push_back({std::move(n), std::nullopt});
            return;
        }
        const std::vector<Match> m = gpt2_find_matches(n.get());
        std::move(n).split_into(m, SplitBehavior::Isolated, AppendSplits{out});
    });
    const char32_t* table = byte_level_chars();
    std::vector<Change> dest;
    s.normalize([&](NormalizedString& n) {
        const std::string& t = n.get();
        dest.clear();
        dest.reserve(t.size());
        for (size_t i = 0; i < t.size();) {
            const size_t len = utf8_len_from_lead(static_cast<unsigned char>(t[i]));
            for (size_t k = 0; k < len; ++k)
                dest.push_back({table[static_cast<unsigned char>(t[i + k])], k > 0 ? 1 : 0});
            i += len;
        }
        n.transform(dest, 0);
    });
}

}  // namespace loom::tokenizer
