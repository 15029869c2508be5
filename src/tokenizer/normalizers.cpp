// Normalizers (HF tokenizers normalizers/*.rs): each edits a NormalizedString
// in place through its alignment-preserving operations.
#include "tokenizer/components.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {
namespace {

bool bert_is_whitespace(char32_t c) { return c == '\t' || c == '\n' || c == '\r' || is_whitespace(c); }
bool bert_is_control(char32_t c) {
    if (c == '\t' || c == '\n' || c == '\r') return false;
    return is_other(c);
}
bool is_chinese_char(char32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

}  // namespace

void BertNormalizer::normalize(NormalizedString& s) const {
    if (clean_text) {
        s.filter([](char32_t c) { return !(c == 0 || c == 0xFFFD || bert_is_control(c)); });
        s.map([](char32_t c) { return bert_is_whitespace(c) ? U' ' : c; });
    }
    if (handle_chinese_chars) {
        bool any = false;
        const std::string& t = s.get();
        for (size_t i = 0; i < t.size() && !any;) {
            size_t len;
            any = is_chinese_char(utf8_decode(t, i, len));
            i += len;
        }
        if (any) {
            std::vector<Change> dest;
            dest.reserve(t.size() + 16);
            for (size_t i = 0; i < t.size();) {
                size_t len;
                const char32_t c = utf8_decode(t, i, len);
                i += len;
                if (is_chinese_char(c)) {
                    dest.push_back({U' ', 0});
                    dest.push_back({c, 1});
                    dest.push_back({U' ', 1});
                } else {
                    dest.push_back({c, 0});
                }
            }
            s.transform(dest, 0);
        }
    }
    if (strip_accents.value_or(lowercase)) {
        s.nfd();
        s.filter([](char32_t c) { return !is_mark_nonspacing(c); });
    }
    if (lowercase) s.lowercase();
}

void UnicodeNormalizer::normalize(NormalizedString& s) const {
    switch (form) {
        case UnicodeForm::NFD: s.nfd(); break;
        case UnicodeForm::NFKD: s.nfkd(); break;
        case UnicodeForm::NFC: s.nfc(); break;
        case UnicodeForm::NFKC: s.nfkc(); break;
    }
}

void StripAccentsNormalizer::normalize(NormalizedString& s) const {
    s.filter([](char32_t c) { return !is_combining_mark(c); });
}

void StripNormalizer::normalize(NormalizedString& s) const {
    if (left && right) {
        s.strip();
    } else {
        if (left) s.lstrip();
        if (right) s.rstrip();
    }
}

void ByteLevelNormalizer::normalize(NormalizedString& s) const {
    if (s.empty()) return;
    const char32_t* table = byte_level_chars();
    std::vector<Change> dest;
    const std::string& t = s.get();
    dest.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
        const size_t len = utf8_len_from_lead(static_cast<unsigned char>(t[i]));
        for (size_t k = 0; k < len; ++k)
            dest.push_back({table[static_cast<unsigned char>(t[i + k])], k > 0 ? 1 : 0});
        i += len;
    }
    s.transform(dest, 0);
}

void NmtNormalizer::normalize(NormalizedString& s) const {
    s.filter([](char32_t c) {
        return !((c >= 0x1 && c <= 0x8) || c == 0xB || (c >= 0xE && c <= 0x1F) || c == 0x7F || c == 0x8F ||
                 c == 0x9F);
    });
    s.map([](char32_t c) -> char32_t {
        switch (c) {
            case 0x9:
            case 0xA:
            case 0xC:
            case 0xD:
            case 0x1680:
            case 0x2028:
            case 0x2029:
            case 0x2581:
            case 0xFEFF:
            case 0xFFFD: return U' ';
            default: return (c >= 0x200B && c <= 0x200F) ? U' ' : c;
        }
    });
}

}  // namespace loom::tokenizer
