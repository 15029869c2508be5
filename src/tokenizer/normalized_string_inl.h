// Template members of NormalizedString and the char-predicate pattern.
#pragma once

#include <cstring>
#include <stdexcept>

#include "tokenizer/unicode.h"

namespace loom::tokenizer {

template <class Keep>
void NormalizedString::filter(Keep keep) {
    // Port of NormalizedString::filter: each kept char carries, as a negative
    // change, the number of removed chars that follow it.
    {
        // Most calls remove nothing: check before building the change stream.
        bool any = false;
        const std::string_view t = normalized_;
        for (size_t i = 0; i < t.size() && !any;) {
            size_t len;
            any = !keep(utf8_decode(t, i, len));
            i += len;
        }
        if (!any) return;
    }
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
    if (try_map_in_place([&](char32_t c, char32_t* out, int& n) { out[n++] = map(c); })) return;
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

template <class Fn>
bool NormalizedString::try_map_in_place(Fn fn) {
    // A stream of change-0 chars that each keep their UTF-8 length leaves every
    // alignment where it was (all bytes of a char share one alignment), so the
    // text can be rewritten in place. This holds when the whole-string range
    // maps to all of `normalized_`, i.e. the first byte has a non-empty alignment.
    if (normalized_.empty()) return true;
    if (alignments_.front().start == alignments_.front().end) return false;
    std::string& t = normalized_;
    // First pass: is every replacement one char of the same length?
    bool changed = false;
    for (size_t i = 0; i < t.size();) {
        size_t len;
        const char32_t c = utf8_decode(t, i, len);
        char32_t out[3];
        int n = 0;
        fn(c, out, n);
        if (n != 1 || utf8_len(out[0]) != len) return false;
        changed |= out[0] != c;
        i += len;
    }
    if (!changed) return true;
    std::string buf;
    for (size_t i = 0; i < t.size();) {
        size_t len;
        const char32_t c = utf8_decode(t, i, len);
        char32_t out[3];
        int n = 0;
        fn(c, out, n);
        if (out[0] != c) {
            buf.clear();
            utf8_append(buf, out[0]);
            std::memcpy(&t[i], buf.data(), len);
        }
        i += len;
    }
    return true;
}

void compute_split_pieces(const std::vector<Match>& matches, SplitBehavior behavior, std::vector<Match>& splits);

template <class Emit>
void NormalizedString::split_into(const std::vector<Match>& matches, SplitBehavior behavior, Emit emit) && {
    thread_local std::vector<Match> splits;
    compute_split_pieces(matches, behavior, splits);
    // A single kept piece that is the whole string is this string itself.
    if (splits.size() == 1 && !splits[0].is_match && is_identity_slice(splits[0].start, splits[0].end)) {
        emit(std::move(*this));
        return;
    }
    for (const Match& p : splits) {
        if (p.is_match || p.start == p.end) continue;  // removed, or empty (dropped by the caller anyway)
        auto piece = slice(p.start, p.end);
        if (!piece) throw std::runtime_error("internal error: NormalizedString bad split");
        emit(std::move(*piece));
    }
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
