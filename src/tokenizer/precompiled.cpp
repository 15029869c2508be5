// The Precompiled normalizer: sentencepiece's compiled normalization rules
// (e.g. nmt_nfkc) as HF tokenizers 0.22.2 applies them (normalizers/
// precompiled.rs on top of the spm_precompiled crate).
//
// Blob layout (precompiled_charsmap, base64 in tokenizer.json):
//   u32 LE trie_size | trie_size bytes of darts-clone units (u32 LE) |
//   UTF-8 replacement strings, each terminated by NUL.
// HF's lookup differs from sentencepiece's own normalizer on purpose (kept
// for parity): it works per extended grapheme cluster, replaces a whole
// grapheme shorter than 6 bytes by the entry of its *shortest* matching
// prefix, and otherwise looks up each char of the grapheme on its own.
#include <utf8proc.h>

#include "tokenizer/components.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {
namespace {

// darts-clone unit fields (spm_precompiled's DoubleArray).
bool unit_has_leaf(uint32_t u) { return ((u >> 8) & 1) == 1; }
uint32_t unit_value(uint32_t u) { return u & ((1u << 31) - 1); }
uint32_t unit_label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
uint32_t unit_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

uint32_t read_u32_le(std::string_view b, size_t at) {
    return static_cast<uint32_t>(static_cast<unsigned char>(b[at])) |
           static_cast<uint32_t>(static_cast<unsigned char>(b[at + 1])) << 8 |
           static_cast<uint32_t>(static_cast<unsigned char>(b[at + 2])) << 16 |
           static_cast<uint32_t>(static_cast<unsigned char>(b[at + 3])) << 24;
}

// Standard base64 with padding (the `base64` crate's STANDARD engine, which
// HF uses to deserialize precompiled_charsmap); nullopt when malformed.
std::optional<std::string> base64_decode(std::string_view in) {
    auto sextet = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        if (c == '+') return 62;
        if (c == '/') return 63;
        return -1;
    };
    if (in.size() % 4 != 0) return std::nullopt;
    std::string out;
    out.reserve(in.size() / 4 * 3);
    for (size_t i = 0; i < in.size(); i += 4) {
        const bool last = i + 4 == in.size();
        const int pad = last ? (in[i + 3] == '=') + (in[i + 2] == '=' && in[i + 3] == '=') : 0;
        int v[4] = {0, 0, 0, 0};
        for (int k = 0; k < 4 - pad; ++k) {
            v[k] = sextet(in[i + static_cast<size_t>(k)]);
            if (v[k] < 0) return std::nullopt;
        }
        const uint32_t n = static_cast<uint32_t>(v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3]);
        out.push_back(static_cast<char>(n >> 16));
        if (pad < 2) out.push_back(static_cast<char>((n >> 8) & 0xFF));
        if (pad < 1) out.push_back(static_cast<char>(n & 0xFF));
        // Non-canonical trailing bits are rejected, as the STANDARD engine does.
        if ((pad == 1 && (v[2] & 0x3)) || (pad == 2 && (v[1] & 0xF))) return std::nullopt;
    }
    return out;
}

// HF's `replace`: `new_part` replaces `old_part`; extra chars are insertions
// (+1) and a shortfall is charged to the last change already emitted (which
// may belong to an earlier grapheme, or be dropped at the very start).
void replace(std::vector<Change>& dest, std::string_view old_part, std::string_view new_part) {
    const long old_count = static_cast<long>(utf8_char_count(old_part));
    const size_t first_new = dest.size();
    for (size_t i = 0; i < new_part.size();) {
        size_t len;
        dest.push_back({utf8_decode(new_part, i, len), 0});
        i += len;
    }
    const long diff = static_cast<long>(dest.size() - first_new) - old_count;
    if (diff > 0) {
        for (size_t k = dest.size() - static_cast<size_t>(diff); k < dest.size(); ++k) dest[k].change = 1;
    } else if (diff < 0 && !dest.empty()) {
        dest.back().change += static_cast<int>(diff);
    }
}

}  // namespace

PrecompiledNormalizer PrecompiledNormalizer::from_charsmap(std::string_view blob, const std::string& where) {
    if (blob.size() < 4) throw TokenizerError(where + ": precompiled_charsmap is shorter than its 4-byte header");
    const uint32_t trie_size = read_u32_le(blob, 0);
    const size_t units = trie_size / 4;  // as spm_precompiled: a partial unit is ignored
    if (units * 4 > blob.size() - 4)
        throw TokenizerError(where + ": precompiled_charsmap declares a " + std::to_string(trie_size) +
                             "-byte trie but holds only " + std::to_string(blob.size() - 4) +
                             " bytes after the header");
    if (units == 0) throw TokenizerError(where + ": precompiled_charsmap has an empty trie");
    PrecompiledNormalizer n;
    n.trie.resize(units);
    for (size_t i = 0; i < units; ++i) n.trie[i] = read_u32_le(blob, 4 + 4 * i);
    n.replacements.assign(blob.substr(4 + units * 4));
    if (!utf8_is_valid(n.replacements))
        throw TokenizerError(where + ": precompiled_charsmap replacement strings are not valid UTF-8");
    return n;
}

std::optional<std::string_view> PrecompiledNormalizer::transform(std::string_view chunk) const {
    // darts-clone common-prefix search, stopping at the first (shortest) hit.
    size_t pos = unit_offset(trie[0]);
    for (const char ch : chunk) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == 0) break;
        pos ^= c;
        if (pos >= trie.size()) return std::nullopt;
        const uint32_t unit = trie[pos];
        if (unit_label(unit) != c) return std::nullopt;
        pos ^= unit_offset(unit);
        if (!unit_has_leaf(unit)) continue;
        if (pos >= trie.size()) throw TokenizerError("Precompiled normalizer: charsmap trie leaf out of range");
        const size_t start = unit_value(trie[pos]);
        if (start > replacements.size() ||
            (start < replacements.size() && (static_cast<unsigned char>(replacements[start]) & 0xC0) == 0x80))
            throw TokenizerError("Precompiled normalizer: charsmap entry " + std::to_string(start) +
                                 " is not the start of a replacement string");
        const size_t end = replacements.find('\0', start);
        return std::string_view(replacements).substr(start, end == std::string::npos ? end : end - start);
    }
    return std::nullopt;
}

void PrecompiledNormalizer::normalize(NormalizedString& s) const {
    const std::string& t = s.get();
    std::vector<Change> dest;
    dest.reserve(t.size());
    bool modified = false;
    utf8proc_int32_t state = 0;
    char32_t prev = 0;
    size_t g_start = 0;
    auto flush = [&](size_t g_end) {
        const std::string_view g(t.data() + g_start, g_end - g_start);
        if (g.size() < 6) {
            if (const auto n = transform(g)) {
                modified = true;
                replace(dest, g, *n);
                return;
            }
        }
        for (size_t i = 0; i < g.size();) {
            size_t len;
            const char32_t c = utf8_decode(g, i, len);
            if (const auto n = transform(g.substr(i, len))) {
                modified = true;
                replace(dest, g.substr(i, len), *n);
            } else {
                dest.push_back({c, 0});
            }
            i += len;
        }
    };
    // Extended grapheme clusters (HF: unicode-segmentation's graphemes(true)).
    for (size_t i = 0; i < t.size();) {
        size_t len;
        const char32_t c = utf8_decode(t, i, len);
        if (i > 0 && utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev),
                                                      static_cast<utf8proc_int32_t>(c), &state)) {
            flush(i);
            g_start = i;
        }
        prev = c;
        i += len;
    }
    if (!t.empty()) flush(t.size());
    if (modified) s.transform(dest, 0);
}

std::unique_ptr<Normalizer> precompiled_normalizer_from_json(const JsonAt& j) {
    const JsonAt m = j.at("precompiled_charsmap");
    const std::optional<std::string> blob = base64_decode(m.as_string());
    if (!blob) m.fail("precompiled_charsmap is not valid base64");
    return std::make_unique<PrecompiledNormalizer>(
        PrecompiledNormalizer::from_charsmap(*blob, m.file + ": " + m.path));
}

}  // namespace loom::tokenizer
