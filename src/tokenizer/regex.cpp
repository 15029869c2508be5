// PCRE2 wrapper with Oniguruma-style match iteration (see regex.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "tokenizer/error.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {

Regex::Regex(const std::string& pattern) : pattern_(pattern) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        throw TokenizerError("invalid regex '" + pattern + "' at offset " + std::to_string(err_off) + ": " +
                             reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional: falls back to the interpreter
    code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<ByteRange> Regex::find_all(std::string_view s) const {
    std::vector<ByteRange> out;
    auto* code = static_cast<pcre2_code*>(code_);
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    size_t last_end = 0;
    bool have_last_match = false;
    size_t last_match_end = 0;
    while (last_end <= s.size()) {
        // The subject is valid UTF-8 (checked on input), so skip PCRE2's check.
        const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), last_end,
                                   PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc < 0) {
            if (rc == PCRE2_ERROR_NOMATCH) break;
            pcre2_match_data_free(md);
            throw TokenizerError("regex '" + pattern_ + "': matching failed (PCRE2 error " +
                                 std::to_string(rc) + ")");
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t st = ov[0], en = ov[1];
        if (en < st) break;  // \K tricks; not produced by tokenizer patterns
        if (st == en && have_last_match && last_match_end == en) {
            // Empty match touching the previous one: advance one char and retry.
            last_end += last_end < s.size() ? utf8_len_from_lead(static_cast<unsigned char>(s[last_end])) : 1;
            continue;
        }
        last_end = en;
        last_match_end = en;
        have_last_match = true;
        out.push_back({st, en});
    }
    pcre2_match_data_free(md);
    return out;
}

std::vector<Match> Regex::find_matches(std::string_view s) const {
    std::vector<Match> out;
    if (s.empty()) {
        out.push_back({0, 0, false});
        return out;
    }
    size_t prev = 0;
    for (const ByteRange& m : find_all(s)) {
        if (prev != m.start) out.push_back({prev, m.start, false});
        out.push_back({m.start, m.end, true});
        prev = m.end;
    }
    if (prev != s.size()) out.push_back({prev, s.size(), false});
    return out;
}

std::string regex_escape(std::string_view s) {
    std::string out;
    for (char c : s) {
        if (std::string_view("\\.+*?()|[]{}^$#&-~").find(c) != std::string_view::npos) out.push_back('\\');
        out.push_back(c);
    }
    return out;
}

}  // namespace loom::tokenizer
