// Decoders (HF tokenizers decoders/*.rs): turn token strings back into text.
// Each works on the whole list (decode_chain); Tokenizer::decode joins the result.
#include "tokenizer/components.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {
namespace {

void replace_all(std::string& s, std::string_view from, std::string_view to) {
    if (from.empty()) return;
    std::string out;
    size_t pos = 0;
    for (size_t hit = s.find(from); hit != std::string::npos; hit = s.find(from, pos)) {
        out.append(s, pos, hit - pos);
        out.append(to);
        pos = hit + from.size();
    }
    if (pos == 0) return;
    out.append(s, pos, std::string::npos);
    s = std::move(out);
}

std::vector<char32_t> to_chars(std::string_view s) {
    std::vector<char32_t> out;
    for (size_t i = 0; i < s.size();) {
        size_t len;
        out.push_back(utf8_decode(s, i, len));
        i += len;
    }
    return out;
}

}  // namespace

std::string wordpiece_cleanup(std::string s) {
    replace_all(s, " .", ".");
    replace_all(s, " ?", "?");
    replace_all(s, " !", "!");
    replace_all(s, " ,", ",");
    replace_all(s, " ' ", "'");
    replace_all(s, " n't", "n't");
    replace_all(s, " 'm", "'m");
    replace_all(s, " do not", " don't");
    replace_all(s, " 's", "'s");
    replace_all(s, " 've", "'ve");
    replace_all(s, " 're", "'re");
    return s;
}

void WordPieceDecoder::decode_chain(std::vector<std::string>& tokens) const {
    for (size_t i = 0; i < tokens.size(); ++i) {
        std::string& t = tokens[i];
        if (i != 0) {
            if (t.compare(0, prefix.size(), prefix) == 0) {
                t.erase(0, prefix.size());
            } else {
                t.insert(t.begin(), ' ');
            }
        }
        if (cleanup) t = wordpiece_cleanup(std::move(t));
    }
}

void ByteLevelDecoder::decode_chain(std::vector<std::string>& tokens) const {
    std::string bytes;
    for (const std::string& t : tokens) {
        const size_t mark = bytes.size();
        bool all = true;
        for (size_t i = 0; i < t.size();) {
            size_t len;
            const int b = byte_level_byte(utf8_decode(t, i, len));
            i += len;
            if (b < 0) {
                all = false;
                break;
            }
            bytes.push_back(static_cast<char>(b));
        }
        if (!all) {  // a token with chars outside the table passes through as is
            bytes.resize(mark);
            bytes += t;
        }
    }
    tokens.assign(1, utf8_lossy(bytes));
}

void MetaspaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
    for (size_t i = 0; i < tokens.size(); ++i) {
        std::string out;
        const std::string& t = tokens[i];
        for (size_t k = 0; k < t.size();) {
            size_t len;
            const char32_t c = utf8_decode(t, k, len);
            k += len;
            if (c == replacement) {
                if (!(i == 0 && prepend_scheme != PrependScheme::Never)) out.push_back(' ');
            } else {
                utf8_append(out, c);
            }
        }
        tokens[i] = std::move(out);
    }
}

void BpeDecoder::decode_chain(std::vector<std::string>& tokens) const {
    for (size_t i = 0; i < tokens.size(); ++i) replace_all(tokens[i], suffix, i + 1 == tokens.size() ? "" : " ");
}

void ByteFallbackDecoder::decode_chain(std::vector<std::string>& tokens) const {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&]() {
        if (pending.empty()) return;
        if (utf8_is_valid(pending)) {
            out.push_back(pending);
        } else {
            for (size_t k = 0; k < pending.size(); ++k) out.push_back("\xEF\xBF\xBD");
        }
        pending.clear();
    };
    auto hexval = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    for (std::string& t : tokens) {
        int byte = -1;
        if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
            const int hi = hexval(t[3]), lo = hexval(t[4]);
            if (hi >= 0 && lo >= 0) byte = hi * 16 + lo;
        }
        if (byte >= 0) {
            pending.push_back(static_cast<char>(byte));
        } else {
            flush();
            out.push_back(std::move(t));
        }
    }
    flush();
    tokens = std::move(out);
}

void FuseDecoder::decode_chain(std::vector<std::string>& tokens) const {
    std::string joined;
    for (const auto& t : tokens) joined += t;
    tokens.assign(1, std::move(joined));
}

void StripDecoder::decode_chain(std::vector<std::string>& tokens) const {
    for (std::string& t : tokens) {
        const std::vector<char32_t> chars = to_chars(t);
        size_t start_cut = 0;
        for (size_t i = 0; i < start && i < chars.size(); ++i) {
            if (chars[i] != content) break;
            start_cut = i + 1;
        }
        size_t stop_cut = chars.size();
        for (size_t i = 0; i < stop && i < chars.size(); ++i) {
            const size_t index = chars.size() - i - 1;
            if (chars[index] != content) break;
            stop_cut = index;
        }
        std::string out;
        for (size_t i = start_cut; i < stop_cut; ++i) utf8_append(out, chars[i]);
        t = std::move(out);
    }
}

void ReplaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
    for (std::string& t : tokens) {
        std::string out;
        for (const Match& m : pattern.find_matches(t)) {
            if (m.is_match) {
                out += content;
            } else {
                out.append(t, m.start, m.end - m.start);
            }
        }
        t = std::move(out);
    }
}

void CtcDecoder::decode_chain(std::vector<std::string>& tokens) const {
    std::vector<std::string> out;
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (i > 0 && tokens[i] == tokens[i - 1]) continue;  // dedup consecutive
        std::string t = tokens[i];
        replace_all(t, pad_token, "");
        if (cleanup) {
            t = wordpiece_cleanup(std::move(t));
            replace_all(t, word_delimiter_token, " ");
        }
        if (!t.empty()) out.push_back(std::move(t));
    }
    tokens = std::move(out);
}

}  // namespace loom::tokenizer
