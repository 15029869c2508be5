// NormalizedString: a string being normalized plus, for every byte of the
// normalized text, the byte range of the original text it came from.
//
// This is a faithful port of Hugging Face tokenizers' NormalizedString
// (tokenizers/src/tokenizer/normalizer.rs, v0.22.2): offsets reported to the
// user are derived from these alignments, so every transformation must move
// them exactly as the reference does. Key invariant:
//   alignments.size() == normalized.size(), and alignment[i] is the original
//   byte range (relative to `original`) that normalized byte i came from.
// `original_shift` is where `original` starts inside the caller's full input.
// Transformations are described as (char, change) streams: change 0 replaces
// the next original char, +1 inserts a char, -n replaces and removes n more.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace loom::tokenizer {

struct Alignment {
    uint32_t start = 0;
    uint32_t end = 0;
    bool operator==(const Alignment& o) const { return start == o.start && end == o.end; }
};

struct ByteRange {
    size_t start = 0;
    size_t end = 0;
};

// One char of a transformation stream.
struct Change {
    char32_t c;
    int change;
};

// A piece of a string as a pattern sees it: [start, end) bytes, matched or not.
struct Match {
    size_t start;
    size_t end;
    bool is_match;
};

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

class NormalizedString {
public:
    NormalizedString() = default;
    explicit NormalizedString(std::string_view s);

    const std::string& get() const { return normalized_; }
    const std::string& original() const { return original_; }
    size_t size() const { return normalized_.size(); }
    bool empty() const { return normalized_.empty(); }
    const std::vector<Alignment>& alignments() const { return alignments_; }
    // [start, end) of `original` inside the caller's full input.
    ByteRange offsets_original() const { return {original_shift_, original_shift_ + original_.size()}; }

    // Normalized byte range -> original byte range (relative to original()).
    std::optional<ByteRange> normalized_to_original(size_t start, size_t end) const;
    // Original byte range -> normalized byte range.
    std::optional<ByteRange> original_to_normalized(size_t start, size_t end) const;

    // Sub-string by normalized byte range; nullopt when not on char boundaries.
    std::optional<NormalizedString> slice(size_t start, size_t end) const;

    // Applies a change stream to normalized bytes [start, end); `initial_offset`
    // chars at the start of the range are removed first.
    void transform_range(size_t start, size_t end, const std::vector<Change>& dest, size_t initial_offset);
    // The same over the whole string (the range the original maps to).
    void transform(const std::vector<Change>& dest, size_t initial_offset);

    void nfd();
    void nfkd();
    void nfc();
    void nfkc();
    void lowercase();
    void prepend(std::string_view s);
    void append(std::string_view s);
    void lstrip() { lrstrip(true, false); }
    void rstrip() { lrstrip(false, true); }
    void strip() { lrstrip(true, true); }

    // Keeps the chars for which keep(c) is true.
    template <class Keep>
    void filter(Keep keep);
    // Replaces every char c with map(c).
    template <class Map>
    void map(Map map);

    // Replaces each matched piece (from a pattern's find_matches) with content.
    void replace(const std::vector<Match>& matches, std::string_view content);
    // Splits by pattern matches with the given behaviour.
    std::vector<NormalizedString> split(const std::vector<Match>& matches, SplitBehavior behavior) const;
    // The same, appending the non-empty pieces to `out` through emit(NormalizedString&&);
    // consumes *this (a piece that is the whole string is moved, not copied).
    template <class Emit>
    void split_into(const std::vector<Match>& matches, SplitBehavior behavior, Emit emit) &&;

private:
    void lrstrip(bool left, bool right);
    // True when slice(start, end) would equal *this.
    bool is_identity_slice(size_t start, size_t end) const;
    // fn(c, out, n) appends c's replacement chars; true when applied in place.
    template <class Fn>
    bool try_map_in_place(Fn fn);
    void apply_if_changed(const std::vector<Change>& dest);

    std::string original_;
    std::string normalized_;
    std::vector<Alignment> alignments_;  // (normalized_.size())
    size_t original_shift_ = 0;
};

// --- patterns -------------------------------------------------------------
// Each returns the pieces covering `s` in order, as HF's Pattern::find_matches.

// Every char for which pred(c) holds is its own match.
template <class Pred>
std::vector<Match> find_char_matches(std::string_view s, Pred pred);
// Non-overlapping occurrences of a literal string.
std::vector<Match> find_literal_matches(std::string_view s, std::string_view literal);
// Flips is_match on every piece (HF's Invert).
void invert_matches(std::vector<Match>& m);

}  // namespace loom::tokenizer

#include "tokenizer/normalized_string_inl.h"
