// Unicode predicates backed by utf8proc, with a 64K-entry flag table for the
// Basic Multilingual Plane so the hot loops never call into utf8proc.
#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <array>
#include <cstring>

namespace loom::tokenizer {
namespace {

enum Flag : uint16_t {
    k_white = 1 << 0,
    k_numeric = 1 << 1,
    k_letter = 1 << 2,
    k_punct = 1 << 3,
    k_other = 1 << 4,
    k_mn = 1 << 5,
    k_mark = 1 << 6,
    k_word = 1 << 7,
};

bool white_space_property(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

uint16_t compute_flags(char32_t c) {
    uint16_t f = 0;
    if (white_space_property(c)) f |= k_white;
    switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
        case UTF8PROC_CATEGORY_LU:
        case UTF8PROC_CATEGORY_LL:
        case UTF8PROC_CATEGORY_LT:
        case UTF8PROC_CATEGORY_LM:
        case UTF8PROC_CATEGORY_LO: f |= k_letter | k_word; break;
        case UTF8PROC_CATEGORY_MN: f |= k_mn | k_mark | k_word; break;
        case UTF8PROC_CATEGORY_MC:
        case UTF8PROC_CATEGORY_ME: f |= k_mark | k_word; break;
        case UTF8PROC_CATEGORY_ND:
        case UTF8PROC_CATEGORY_NL: f |= k_numeric | k_word; break;
        case UTF8PROC_CATEGORY_NO: f |= k_numeric; break;
        case UTF8PROC_CATEGORY_PC: f |= k_punct | k_word; break;
        case UTF8PROC_CATEGORY_PD:
        case UTF8PROC_CATEGORY_PS:
        case UTF8PROC_CATEGORY_PE:
        case UTF8PROC_CATEGORY_PI:
        case UTF8PROC_CATEGORY_PF:
        case UTF8PROC_CATEGORY_PO: f |= k_punct; break;
        case UTF8PROC_CATEGORY_CN:
        case UTF8PROC_CATEGORY_CC:
        case UTF8PROC_CATEGORY_CF:
        case UTF8PROC_CATEGORY_CS:
        case UTF8PROC_CATEGORY_CO: f |= k_other; break;
        default: break;
    }
    if (c == 0x200C || c == 0x200D) f |= k_word;  // Join_Control
    return f;
}

struct FlagTable {
    std::array<uint16_t, 0x10000> bmp{};
    FlagTable() {
        for (char32_t c = 0; c < 0x10000; ++c) bmp[c] = compute_flags(c);
    }
};

inline uint16_t flags(char32_t c) {
    static const FlagTable table;
    if (c < 0x10000) return table.bmp[c];
    if (c > 0x10FFFF) return k_other;
    return compute_flags(c);
}

}  // namespace

size_t utf8_char_count(std::string_view s) {
    size_t n = 0;
    for (unsigned char b : s) n += (b & 0xC0) != 0x80;
    return n;
}

// Length of the valid sequence at s[i], or 0 when it is not valid UTF-8.
// Follows the Unicode "maximal subpart" rules that Rust's from_utf8_lossy uses;
// `bad_len` receives how many bytes one U+FFFD replaces.
static size_t valid_seq_len(std::string_view s, size_t i, size_t& bad_len) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    bad_len = 1;
    if (b0 < 0x80) return 1;
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    for (size_t k = 1; k <= need; ++k) {
        if (i + k >= s.size()) return 0;
        const auto b = static_cast<unsigned char>(s[i + k]);
        const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (b < l || b > h) return 0;
        bad_len = k + 1;
    }
    return need + 1;
}

bool utf8_is_valid(std::string_view s) {
    size_t i = 0, bad = 0;
    while (i < s.size()) {
        const auto b = static_cast<unsigned char>(s[i]);
        if (b < 0x80) {
            ++i;
            continue;
        }
        const size_t n = valid_seq_len(s, i, bad);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

std::string utf8_lossy(std::string_view s) {
    std::string out;
    out.reserve(s.size() + 8);
    size_t i = 0, bad = 0;
    while (i < s.size()) {
        const size_t n = valid_seq_len(s, i, bad);
        if (n == 0) {
            out += "\xEF\xBF\xBD";
            i += bad;
        } else {
            out.append(s.data() + i, n);
            i += n;
        }
    }
    return out;
}

bool is_whitespace(char32_t c) { return flags(c) & k_white; }
bool is_numeric(char32_t c) { return flags(c) & k_numeric; }
bool is_letter(char32_t c) { return flags(c) & k_letter; }
bool is_number(char32_t c) { return flags(c) & k_numeric; }
bool is_punctuation(char32_t c) { return flags(c) & k_punct; }
bool is_other(char32_t c) { return flags(c) & k_other; }
bool is_mark_nonspacing(char32_t c) { return flags(c) & k_mn; }
bool is_combining_mark(char32_t c) { return flags(c) & k_mark; }
bool is_word_char(char32_t c) { return flags(c) & k_word; }

bool is_ascii_punctuation(char32_t c) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
}

void append_lowercase(char32_t c, char32_t* out, int& n) {
    if (c < 0x80) {
        out[n++] = (c >= 'A' && c <= 'Z') ? c + 32 : c;
        return;
    }
    if (c == 0x130) {  // SpecialCasing: LATIN CAPITAL LETTER I WITH DOT ABOVE
        out[n++] = 'i';
        out[n++] = 0x307;
        return;
    }
    out[n++] = static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}

}  // namespace loom::tokenizer
