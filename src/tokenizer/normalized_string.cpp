// NormalizedString: alignment-preserving string edits (see the header).
#include "tokenizer/normalized_string.h"

#include <algorithm>

#include "tokenizer/error.h"
#include "tokenizer/unicode_normalize.h"

namespace loom::tokenizer {

NormalizedString::NormalizedString(std::string_view s) : original_(s), normalized_(s) {
    alignments_.resize(s.size());
    for (size_t i = 0; i < s.size();) {
        const size_t len = utf8_len_from_lead(static_cast<unsigned char>(s[i]));
        const Alignment a{static_cast<uint32_t>(i), static_cast<uint32_t>(i + len)};
        for (size_t k = 0; k < len && i + k < s.size(); ++k) alignments_[i + k] = a;
        i += len;
    }
}

std::optional<ByteRange> NormalizedString::normalized_to_original(size_t start, size_t end) const {
    if (start == end) return ByteRange{start, end};
    if (start > end) return std::nullopt;
    if (normalized_.empty() && start == 0 && end == 0) return ByteRange{0, original_.size()};
    if (end > alignments_.size()) return std::nullopt;
    return ByteRange{alignments_[start].start, alignments_[end - 1].end};
}

std::optional<ByteRange> NormalizedString::original_to_normalized(size_t start, size_t end) const {
    // Port of convert_offsets(Range::Original): first non-empty alignment at or
    // after `start`, up to the last alignment that ends before `end`.
    if (start == end) return ByteRange{start, end};
    if (start > end) return std::nullopt;
    if (original_.empty() && start == 0 && end == 0) return ByteRange{0, normalized_.size()};
    std::optional<size_t> s, e;
    for (size_t i = 0; i < alignments_.size(); ++i) {
        const Alignment& a = alignments_[i];
        if (end < a.end) break;
        if (!s && start <= a.start && a.start != a.end) s = i;
        e = i + 1;
    }
    if (s && e) return ByteRange{*s, *e};
    if (s) return ByteRange{*s, *s};
    if (e) return ByteRange{*e, *e};
    return std::nullopt;
}

static bool is_char_boundary(const std::string& s, size_t i) {
    if (i == 0 || i == s.size()) return true;
    if (i > s.size()) return false;
    return (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
}

std::optional<NormalizedString> NormalizedString::slice(size_t start, size_t end) const {
    if (start > normalized_.size() || end > normalized_.size()) return std::nullopt;
    if (!is_char_boundary(normalized_, start) || !is_char_boundary(normalized_, end)) return std::nullopt;
    const auto orig = normalized_to_original(start, end);
    if (!orig) return std::nullopt;
    NormalizedString out;
    if (start < end) out.normalized_.assign(normalized_, start, end - start);
    if (orig->start < orig->end && orig->end <= original_.size())
        out.original_.assign(original_, orig->start, orig->end - orig->start);
    const size_t n_shift = orig->start;
    if (start < end) {
        out.alignments_.assign(alignments_.begin() + static_cast<std::ptrdiff_t>(start),
                               alignments_.begin() + static_cast<std::ptrdiff_t>(end));
        for (auto& a : out.alignments_) {
            a.start = static_cast<uint32_t>(a.start - n_shift);
            a.end = static_cast<uint32_t>(a.end - n_shift);
        }
    }
    out.original_shift_ = original_shift_ + orig->start;
    return out;
}

void NormalizedString::transform_range(size_t n_start, size_t n_end, const std::vector<Change>& dest,
                                       size_t initial_offset) {
    if (n_start > n_end || n_end > normalized_.size())
        throw TokenizerError("internal error: NormalizedString::transform_range out of bounds");
    // The chars being replaced, consumed in order as the stream says.
    const std::string_view replaced(normalized_.data() + n_start, n_end - n_start);
    size_t rpos = 0;  // byte position inside `replaced`
    auto next_replaced_len = [&]() -> size_t {
        if (rpos >= replaced.size()) return 0;
        const size_t len = utf8_len_from_lead(static_cast<unsigned char>(replaced[rpos]));
        rpos += len;
        return len;
    };
    for (size_t k = 0; k < initial_offset; ++k) next_replaced_len();

    size_t offset = rpos + n_start;
    std::string new_text;
    new_text.reserve(dest.size() + 8);
    std::vector<Alignment> new_align;
    new_align.reserve(dest.size() + 8);
    for (const Change& ch : dest) {
        const size_t idx = offset;
        Alignment align;
        if (ch.change > 0) {
            align = idx < 1 ? Alignment{0, 0} : alignments_.at(idx - 1);
        } else {
            align = alignments_.at(idx);
        }
        if (ch.change <= 0) offset += next_replaced_len();
        if (ch.change < 0)
            for (int k = 0; k < -ch.change; ++k) offset += next_replaced_len();
        const size_t before = new_text.size();
        utf8_append(new_text, ch.c);
        new_align.insert(new_align.end(), new_text.size() - before, align);
    }
    alignments_.erase(alignments_.begin() + static_cast<std::ptrdiff_t>(n_start),
                      alignments_.begin() + static_cast<std::ptrdiff_t>(n_end));
    alignments_.insert(alignments_.begin() + static_cast<std::ptrdiff_t>(n_start), new_align.begin(),
                       new_align.end());
    normalized_.replace(n_start, n_end - n_start, new_text);
}

void NormalizedString::transform(const std::vector<Change>& dest, size_t initial_offset) {
    const auto r = original_to_normalized(0, original_.size());
    if (!r) return;
    transform_range(r->start, r->end, dest, initial_offset);
}

void NormalizedString::apply_if_changed(const std::vector<Change>& dest) {
    // A stream of only change-0 chars equal to the current text is the identity.
    bool same = true;
    size_t i = 0;
    const std::string_view s = normalized_;
    for (const Change& ch : dest) {
        if (ch.change != 0 || i >= s.size()) {
            same = false;
            break;
        }
        size_t len;
        if (utf8_decode(s, i, len) != ch.c) {
            same = false;
            break;
        }
        i += len;
    }
    if (same && i == s.size()) return;
    transform(dest, 0);
}

static bool is_ascii(std::string_view s) {
    for (unsigned char b : s)
        if (b >= 0x80) return false;
    return true;
}

void NormalizedString::nfd() {
    if (is_ascii(normalized_)) return;
    apply_if_changed(normalize_stream(normalized_, NormalForm::NFD));
}
void NormalizedString::nfkd() {
    if (is_ascii(normalized_)) return;
    apply_if_changed(normalize_stream(normalized_, NormalForm::NFKD));
}
void NormalizedString::nfc() {
    if (is_ascii(normalized_)) return;
    apply_if_changed(normalize_stream(normalized_, NormalForm::NFC));
}
void NormalizedString::nfkc() {
    if (is_ascii(normalized_)) return;
    apply_if_changed(normalize_stream(normalized_, NormalForm::NFKC));
}

void NormalizedString::lowercase() {
    if (try_map_in_place([](char32_t c, char32_t* out, int& n) { append_lowercase(c, out, n); })) return;
    std::vector<Change> dest;
    dest.reserve(normalized_.size());
    const std::string_view s = normalized_;
    for (size_t i = 0; i < s.size();) {
        size_t len;
        const char32_t c = utf8_decode(s, i, len);
        i += len;
        char32_t out[3];
        int n = 0;
        append_lowercase(c, out, n);
        for (int k = 0; k < n; ++k) dest.push_back({out[k], k > 0 ? 1 : 0});
    }
    apply_if_changed(dest);
}

void NormalizedString::prepend(std::string_view s) {
    if (normalized_.empty()) return;
    size_t next_len;
    const char32_t next = utf8_decode(normalized_, 0, next_len);
    std::vector<Change> dest;
    bool first = true;
    for (size_t i = 0; i < s.size();) {
        size_t len;
        const char32_t c = utf8_decode(s, i, len);
        i += len;
        dest.push_back({c, first ? 0 : 1});
        first = false;
    }
    dest.push_back({next, 1});
    transform_range(0, next_len, dest, 0);
}

void NormalizedString::append(std::string_view s) {
    std::vector<Change> dest;
    size_t b = 0;
    if (!normalized_.empty()) {
        b = normalized_.size() - 1;
        while (b > 0 && (static_cast<unsigned char>(normalized_[b]) & 0xC0) == 0x80) --b;
        size_t len;
        dest.push_back({utf8_decode(normalized_, b, len), 0});
    }
    for (size_t i = 0; i < s.size();) {
        size_t len;
        dest.push_back({utf8_decode(s, i, len), 1});
        i += len;
    }
    transform_range(b, normalized_.size(), dest, 0);
}

void NormalizedString::lrstrip(bool left, bool right) {
    std::vector<char32_t> chars;
    const std::string_view s = normalized_;
    for (size_t i = 0; i < s.size();) {
        size_t len;
        chars.push_back(utf8_decode(s, i, len));
        i += len;
    }
    size_t leading = 0, trailing = 0;
    if (left)
        while (leading < chars.size() && is_whitespace(chars[leading])) ++leading;
    if (right)
        while (trailing < chars.size() && is_whitespace(chars[chars.size() - 1 - trailing])) ++trailing;
    if (leading == 0 && trailing == 0) return;
    // NOTE: the reference compares the char index with the *byte* length for
    // the char that carries the trailing removal; kept as is for parity.
    const size_t count = chars.size();
    std::vector<Change> dest;
    for (size_t i = 0; i < count; ++i) {
        if (i < leading || i + trailing >= count) continue;
        if (i + trailing + 1 == normalized_.size()) {
            dest.push_back({chars[i], -static_cast<int>(trailing)});
        } else {
            dest.push_back({chars[i], 0});
        }
    }
    transform(dest, leading);
}

void NormalizedString::replace(const std::vector<Match>& matches, std::string_view content) {
    bool any = false;
    for (const Match& m : matches) any |= m.is_match;
    if (!any) return;
    std::string new_text;
    new_text.reserve(normalized_.size());
    std::vector<Alignment> new_align;
    new_align.reserve(alignments_.size());
    size_t last_end = 0;
    for (const Match& m : matches) {
        if (!m.is_match) continue;
        new_text.append(normalized_, last_end, m.start - last_end);
        new_align.insert(new_align.end(), alignments_.begin() + static_cast<std::ptrdiff_t>(last_end),
                         alignments_.begin() + static_cast<std::ptrdiff_t>(m.start));
        // Every inserted char takes the alignment of the match's last byte.
        const Alignment align = m.end < 1 ? Alignment{0, 0} : alignments_[m.end - 1];
        const size_t before = new_text.size();
        new_text.append(content);
        new_align.insert(new_align.end(), new_text.size() - before, align);
        last_end = m.end;
    }
    new_text.append(normalized_, last_end, std::string::npos);
    new_align.insert(new_align.end(), alignments_.begin() + static_cast<std::ptrdiff_t>(last_end),
                     alignments_.end());
    normalized_ = std::move(new_text);
    alignments_ = std::move(new_align);
}

std::vector<NormalizedString> NormalizedString::split(const std::vector<Match>& matches,
                                                      SplitBehavior behavior) const {
    std::vector<NormalizedString> out;
    NormalizedString copy = *this;
    std::move(copy).split_into(matches, behavior, [&](NormalizedString&& n) { out.push_back(std::move(n)); });
    return out;
}

void compute_split_pieces(const std::vector<Match>& matches, SplitBehavior behavior, std::vector<Match>& splits) {
    // Match.is_match is reused as "remove this piece".
    splits.clear();
    switch (behavior) {
        case SplitBehavior::Isolated:
            for (const Match& m : matches) splits.push_back({m.start, m.end, false});
            break;
        case SplitBehavior::Removed:
            for (const Match& m : matches) splits.push_back({m.start, m.end, m.is_match});
            break;
        case SplitBehavior::Contiguous: {
            bool prev = false;
            for (const Match& m : matches) {
                if (m.is_match == prev && !splits.empty()) {
                    splits.back().end = m.end;
                } else {
                    splits.push_back({m.start, m.end, false});
                }
                prev = m.is_match;
            }
            break;
        }
        case SplitBehavior::MergedWithPrevious: {
            bool prev = false;
            for (const Match& m : matches) {
                if (m.is_match && !prev && !splits.empty()) {
                    splits.back().end = m.end;
                } else {
                    splits.push_back({m.start, m.end, false});
                }
                prev = m.is_match;
            }
            break;
        }
        case SplitBehavior::MergedWithNext: {
            bool prev = false;
            for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
                if (it->is_match && !prev && !splits.empty()) {
                    splits.back().start = it->start;
                } else {
                    splits.push_back({it->start, it->end, false});
                }
                prev = it->is_match;
            }
            std::reverse(splits.begin(), splits.end());
            break;
        }
    }
}

bool NormalizedString::is_identity_slice(size_t start, size_t end) const {
    return start == 0 && end == normalized_.size() && !alignments_.empty() && alignments_.front().start == 0 &&
           alignments_.back().end == original_.size();
}

std::vector<Match> find_literal_matches(std::string_view s, std::string_view literal) {
    std::vector<Match> out;
    if (literal.empty()) {
        // As the reference: an empty pattern matches nothing (its end is in chars).
        out.push_back({0, utf8_char_count(s), false});
        return out;
    }
    if (s.empty()) {
        out.push_back({0, 0, false});
        return out;
    }
    size_t prev = 0;
    size_t pos = s.find(literal);
    while (pos != std::string_view::npos) {
        if (prev != pos) out.push_back({prev, pos, false});
        out.push_back({pos, pos + literal.size(), true});
        prev = pos + literal.size();
        pos = s.find(literal, prev);
    }
    if (prev != s.size()) out.push_back({prev, s.size(), false});
    return out;
}

void invert_matches(std::vector<Match>& m) {
    for (auto& x : m) x.is_match = !x.is_match;
}

}  // namespace loom::tokenizer
