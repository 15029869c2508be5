// A hand-written matcher for GPT-2's pre-tokenization regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with the regex engine's leftmost-first semantics: at each position the first
// alternative that matches wins, and every position starts some match, so the
// matches tile the input. \s is White_Space; \p{L} and \p{N} are categories.
#include "tokenizer/components.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {
namespace {

enum class Kind { Letter, Number, Space, Other };

inline Kind kind_of(char32_t c) {
    if (c < 0x80) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return Kind::Letter;
        if (c >= '0' && c <= '9') return Kind::Number;
        if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return Kind::Space;
        return Kind::Other;
    }
    if (is_whitespace(c)) return Kind::Space;
    if (is_letter(c)) return Kind::Letter;
    if (is_number(c)) return Kind::Number;
    return Kind::Other;
}

// Length of the contraction at s[i] (s[i] == '\''), or 0.
inline size_t contraction_len(std::string_view s, size_t i) {
    const size_t rest = s.size() - i;
    if (rest < 2) return 0;
    const char a = s[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (rest >= 3) {
        const char b = s[i + 2];
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
    return 0;
}

}  // namespace

std::vector<Match> gpt2_find_matches(std::string_view s) {
    std::vector<Match> out;
    if (s.empty()) {
        out.push_back({0, 0, false});
        return out;
    }
    out.reserve(s.size() / 4 + 2);
    // Run end of chars of kind k starting at j.
    auto run_end = [&](size_t j, Kind k) {
        while (j < s.size()) {
            size_t len;
            const char32_t c = utf8_decode(s, j, len);
            if (kind_of(c) != k) break;
            j += len;
        }
        return j;
    };
    size_t i = 0;
    while (i < s.size()) {
        size_t len;
        const char32_t c = utf8_decode(s, i, len);
        size_t end = 0;
        if (c == '\'') end = i + contraction_len(s, i);
        if (end <= i) {
            const Kind k = kind_of(c);
            if (c == ' ' && i + 1 < s.size()) {
                size_t len2;
                const Kind k2 = kind_of(utf8_decode(s, i + 1, len2));
                if (k2 != Kind::Space) end = run_end(i + 1 + len2, k2);
            }
            if (end <= i) {
                if (k != Kind::Space) {
                    end = run_end(i + len, k);
                } else {
                    const size_t j = run_end(i + len, Kind::Space);
                    if (j == s.size()) {
                        end = j;  // \s+(?!\S) at the end of input
                    } else {
                        // Followed by non-space: give the last space back, unless
                        // that leaves nothing (then \s+ takes the single space).
                        size_t last = j - 1;
                        while ((static_cast<unsigned char>(s[last]) & 0xC0) == 0x80) --last;
                        end = last > i ? last : j;
                    }
                }
            }
        }
        out.push_back({i, end, true});
        i = end;
    }
    return out;
}

}  // namespace loom::tokenizer
