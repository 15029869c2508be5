// Template members of NormalizedString and the char-predicate pattern.
#pragma once

#include "tokenizer/unicode.h"

namespace loom::tokenizer {

template <class Keep>
void NormalizedString::filter(Keep keep) {
    // Port of NormalizedString::filter: each kept char carries, as a negative
    // change, the number of removed chars that follow it.
    std::vector<Change> dest;
    dest.reserve(normalized_.size());
    int removed = 0;
    size_t removed_start = 0;
    bool have_last = false;
    char32_t last_c = 0;
    bool any_removed = false;
    const std::string_view s = normalized_;
    for (size_t i = 0; i < s.size();) {
        size_t len;
        const char32_t c = utf8_decode(s, i, len);
        i += len;
        if (keep(c)) {
            if (have_last) {
                dest.push_back({last_c, -removed});
            } else {
                removed_start = static_cast<size_t>(removed);
            }
            last_c = c;
            have_last = true;
            removed = 0;
        } else {
            ++removed;
            any_removed = true;
        }
    }
    if (!any_removed) return;  // identity: alignments unchanged
    if (have_last) dest.push_back({last_c, -removed});
    transform(dest, removed_start);
}

template <class Map>
void NormalizedString::map(Map map) {
    std::vector<Change> dest;
    dest.reserve(normalized_.size());
    const std::string_view s = normalized_;
    for (size_t i = 0; i < s.size();) {
        size_t len;
        const char32_t c = utf8_decode(s, i, len);
        i += len;
        dest.push_back({map(c), 0});
    }
    apply_if_changed(dest);
}

template <class Pred>
std::vector<Match> find_char_matches(std::string_view s, Pred pred) {
    std::vector<Match> out;
    if (s.empty()) {
        out.push_back({0, 0, false});
        return out;
    }
    size_t last_offset = 0;
    size_t last_seen = 0;
    for (size_t i = 0; i < s.size();) {
        size_t len;
        const char32_t c = utf8_decode(s, i, len);
        last_seen = i + len;
        if (pred(c)) {
            if (last_offset < i) out.push_back({last_offset, i, false});
            out.push_back({i, i + len, true});
            last_offset = i + len;
        }
        i += len;
    }
    if (last_seen > last_offset) out.push_back({last_offset, last_seen, false});
    return out;
}

}  // namespace loom::tokenizer
