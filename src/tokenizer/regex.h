// A compiled regular expression (PCRE2, UTF + UCP, JIT when available) with
// the match iteration HF tokenizers gets from Oniguruma: leftmost matches,
// and an empty match right where the previous match ended is skipped.
//
// Thread-safe for matching: each call allocates its own match data.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/normalized_string.h"

namespace loom::tokenizer {

class Regex {
public:
    // Throws TokenizerError with PCRE2's message and the offset of the problem.
    explicit Regex(const std::string& pattern);
    ~Regex();
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    const std::string& pattern() const { return pattern_; }
    // All pieces of `s` (matches and the gaps between them), as Pattern::find_matches.
    std::vector<Match> find_matches(std::string_view s) const;
    // The raw matches only.
    std::vector<ByteRange> find_all(std::string_view s) const;

private:
    std::string pattern_;
    void* code_ = nullptr;  // pcre2_code_8*
};

// Escapes every regex metacharacter so the pattern matches `s` literally.
std::string regex_escape(std::string_view s);

}  // namespace loom::tokenizer
