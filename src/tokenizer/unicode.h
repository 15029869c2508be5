// UTF-8 and Unicode character properties used by the tokenizer pipeline.
//
// Properties follow the Rust functions Hugging Face tokenizers calls:
// is_whitespace = White_Space, is_numeric = N*, is_punctuation = P*,
// is_other = C*, lowercase = Rust char::to_lowercase (full mapping). Data comes
// from utf8proc (Unicode 15); HF's own crates carry older tables (categories
// from Unicode 8, normalization from Unicode 9), so code points assigned after
// those versions may be classified differently. Nothing here allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace loom::tokenizer {

// Decodes the code point starting at s[i] of *valid* UTF-8; sets len to its byte count.
inline char32_t utf8_decode(std::string_view s, size_t i, size_t& len) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) {
        len = 1;
        return b0;
    }
    if (b0 < 0xE0) {
        len = 2;
        return (char32_t(b0 & 0x1F) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3F);
    }
    if (b0 < 0xF0) {
        len = 3;
        return (char32_t(b0 & 0x0F) << 12) | (char32_t(static_cast<unsigned char>(s[i + 1]) & 0x3F) << 6) |
               (static_cast<unsigned char>(s[i + 2]) & 0x3F);
    }
    len = 4;
    return (char32_t(b0 & 0x07) << 18) | (char32_t(static_cast<unsigned char>(s[i + 1]) & 0x3F) << 12) |
           (char32_t(static_cast<unsigned char>(s[i + 2]) & 0x3F) << 6) |
           (static_cast<unsigned char>(s[i + 3]) & 0x3F);
}

// Byte length of the UTF-8 sequence led by byte b (1 for stray continuation bytes).
inline size_t utf8_len_from_lead(unsigned char b) {
    if (b < 0xC0) return 1;
    if (b < 0xE0) return 2;
    if (b < 0xF0) return 3;
    return 4;
}

inline size_t utf8_len(char32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

inline void utf8_append(std::string& out, char32_t c) {
    if (c < 0x80) {
        out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (c >> 6)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (c >> 12)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (c >> 18)));
        out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
}

// Number of code points in valid UTF-8.
size_t utf8_char_count(std::string_view s);

// True when s is well-formed UTF-8 (no overlongs, surrogates or values past U+10FFFF).
bool utf8_is_valid(std::string_view s);

// Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes U+FFFD.
std::string utf8_lossy(std::string_view s);

// General-category and property predicates (see the file comment for their sources).
bool is_whitespace(char32_t c);      // White_Space (Rust char::is_whitespace)
bool is_numeric(char32_t c);         // Nd | Nl | No (Rust char::is_numeric)
bool is_letter(char32_t c);          // L*  (regex \p{L})
bool is_number(char32_t c);          // N*  (regex \p{N})
bool is_punctuation(char32_t c);     // P*  (unicode_categories is_punctuation)
bool is_other(char32_t c);           // C*  (unicode_categories is_other)
bool is_mark_nonspacing(char32_t c); // Mn
bool is_combining_mark(char32_t c);  // M*
bool is_word_char(char32_t c);       // regex \w: L | M | Nd | Nl | Pc | Join_Control
bool is_ascii_punctuation(char32_t c);

// Appends Rust's char::to_lowercase(c) (U+0130 lowers to two code points).
void append_lowercase(char32_t c, char32_t* out, int& n);

}  // namespace loom::tokenizer
