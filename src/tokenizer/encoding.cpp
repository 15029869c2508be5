// Encoding operations: truncation with overflow, merging, padding.
#include "tokenizer/encoding.h"

#include <algorithm>
#include <iterator>
#include <optional>

#include "tokenizer/error.h"

namespace loom::tokenizer {

void Encoding::reserve(size_t n) {
    ids.reserve(n);
    type_ids.reserve(n);
    tokens.reserve(n);
    word_ids.reserve(n);
    offsets.reserve(n);
    offsets_utf8.reserve(n);
    special_tokens_mask.reserve(n);
    attention_mask.reserve(n);
}

void Encoding::push_back(uint32_t id, std::string token, Offsets chars, Offsets bytes, int64_t word,
                         uint32_t type_id, uint32_t special, uint32_t attention) {
    ids.push_back(id);
    tokens.push_back(std::move(token));
    offsets.push_back(chars);
    offsets_utf8.push_back(bytes);
    word_ids.push_back(word);
    type_ids.push_back(type_id);
    special_tokens_mask.push_back(special);
    attention_mask.push_back(attention);
}

std::vector<int64_t> Encoding::sequence_ids() const {
    std::vector<int64_t> out(size(), -1);
    const size_t n_sequences = sequence_ranges.empty() ? 1 : sequence_ranges.size();
    for (size_t seq = 0; seq < n_sequences; ++seq) {
        size_t start = 0, end = size();
        for (const auto& r : sequence_ranges)
            if (r.sequence == seq) {
                start = r.start;
                end = r.end;
            }
        for (size_t i = start; i < end && i < out.size(); ++i) out[i] = static_cast<int64_t>(seq);
    }
    return out;
}

void Encoding::set_sequence_id(size_t sequence) {
    for (auto& r : sequence_ranges)
        if (r.sequence == sequence) {
            r.start = 0;
            r.end = size();
            return;
        }
    sequence_ranges.push_back({sequence, 0, size()});
}

Encoding Encoding::slice_copy(size_t start, size_t stop) const {
    Encoding e;
    auto cut = [&](const auto& v) { return std::decay_t<decltype(v)>(v.begin() + start, v.begin() + stop); };
    e.ids = cut(ids);
    e.type_ids = cut(type_ids);
    e.tokens = cut(tokens);
    e.word_ids = cut(word_ids);
    e.offsets = cut(offsets);
    e.offsets_utf8 = cut(offsets_utf8);
    e.special_tokens_mask = cut(special_tokens_mask);
    e.attention_mask = cut(attention_mask);
    return e;
}

void Encoding::truncate(size_t max_len, size_t stride, TruncationDirection direction) {
    const size_t len = ids.size();
    if (max_len >= len) return;
    if (max_len == 0) {
        Encoding whole = std::move(*this);
        *this = Encoding{};
        overflowing.push_back(std::move(whole));
        return;
    }
    if (stride >= max_len)
        throw TokenizerError("truncation: stride (" + std::to_string(stride) +
                             ") must be strictly less than max_length (" + std::to_string(max_len) +
                             ") after removing the special tokens the post-processor adds");
    sequence_ranges.clear();
    const size_t step = max_len - stride;
    std::vector<std::pair<size_t, size_t>> parts;
    bool end = false;
    if (direction == TruncationDirection::Right) {
        for (size_t start = 0; start < len && !end; start += step) {
            const size_t stop = std::min(start + max_len, len);
            end = stop == len;
            parts.emplace_back(start, stop);
        }
    } else {
        // (0..len).rev().step_by(step): stops at len-1, len-1-step, ...
        for (size_t k = 0;; ++k) {
            const size_t idx_from_end = k * step;
            if (idx_from_end >= len) break;
            const size_t stop = len - idx_from_end;  // (len - 1 - k*step) + 1
            const size_t start = stop > max_len ? stop - max_len : 0;
            if (start < stop && !end) {
                end = start == 0;
                parts.emplace_back(start, stop);
            }
        }
    }
    Encoding first = slice_copy(parts[0].first, parts[0].second);
    for (size_t i = 1; i < parts.size(); ++i) first.overflowing.push_back(slice_copy(parts[i].first, parts[i].second));
    *this = std::move(first);
}

void Encoding::merge_with(const Encoding& pair, bool growing_offsets) { merge_with(Encoding(pair), growing_offsets); }

void Encoding::merge_with(Encoding&& pair, bool growing_offsets) {
    std::vector<Encoding> overflowings;
    for (const Encoding& self_o : overflowing) {
        Encoding n = self_o;
        n.merge_with(pair, growing_offsets);
        overflowings.push_back(std::move(n));
        for (const Encoding& other_o : pair.overflowing) {
            Encoding m = self_o;
            m.merge_with(other_o, growing_offsets);
            overflowings.push_back(std::move(m));
        }
    }
    for (const Encoding& other_o : pair.overflowing) {
        Encoding n = *this;
        n.merge_with(other_o, growing_offsets);
        overflowings.push_back(std::move(n));
    }

    const size_t original_len = size();
    for (const auto& r : pair.sequence_ranges) {
        const SequenceRange shifted{r.sequence, original_len + r.start, original_len + r.end};
        bool replaced = false;
        for (auto& mine : sequence_ranges)
            if (mine.sequence == r.sequence) {
                mine = shifted;
                replaced = true;
            }
        if (!replaced) sequence_ranges.push_back(shifted);
    }
    ids.insert(ids.end(), pair.ids.begin(), pair.ids.end());
    type_ids.insert(type_ids.end(), pair.type_ids.begin(), pair.type_ids.end());
    tokens.insert(tokens.end(), std::make_move_iterator(pair.tokens.begin()),
                  std::make_move_iterator(pair.tokens.end()));
    word_ids.insert(word_ids.end(), pair.word_ids.begin(), pair.word_ids.end());
    const size_t shift_chars = growing_offsets && !offsets.empty() ? offsets.back().end : 0;
    const size_t shift_bytes = growing_offsets && !offsets_utf8.empty() ? offsets_utf8.back().end : 0;
    for (const Offsets& o : pair.offsets) offsets.push_back({o.start + shift_chars, o.end + shift_chars});
    for (const Offsets& o : pair.offsets_utf8) offsets_utf8.push_back({o.start + shift_bytes, o.end + shift_bytes});
    special_tokens_mask.insert(special_tokens_mask.end(), pair.special_tokens_mask.begin(),
                               pair.special_tokens_mask.end());
    attention_mask.insert(attention_mask.end(), pair.attention_mask.begin(), pair.attention_mask.end());
    overflowing = std::move(overflowings);
}

Encoding Encoding::merge(std::vector<Encoding>& encodings, bool growing_offsets) {
    Encoding out;
    for (Encoding& e : encodings) {
        if (out.empty() && out.overflowing.empty() && out.sequence_ranges.empty()) {
            // Merging into an empty encoding is a copy; move instead.
            out = std::move(e);
            continue;
        }
        out.merge_with(std::move(e), growing_offsets);
    }
    return out;
}

void Encoding::pad(size_t target_length, uint32_t pad_id, uint32_t pad_type_id, const std::string& pad_token,
                   PaddingDirection direction) {
    for (Encoding& o : overflowing) o.pad(target_length, pad_id, pad_type_id, pad_token, direction);
    if (ids.size() >= target_length) return;
    const size_t n = target_length - ids.size();
    auto pad_vec = [&](auto& v, auto value) {
        using T = typename std::decay_t<decltype(v)>::value_type;
        if (direction == PaddingDirection::Left) {
            v.insert(v.begin(), n, T(value));
        } else {
            v.insert(v.end(), n, T(value));
        }
    };
    pad_vec(ids, pad_id);
    pad_vec(type_ids, pad_type_id);
    pad_vec(tokens, pad_token);
    pad_vec(word_ids, int64_t{-1});
    pad_vec(attention_mask, 0u);
    pad_vec(special_tokens_mask, 1u);
    pad_vec(offsets, Offsets{});
    pad_vec(offsets_utf8, Offsets{});
    if (direction == PaddingDirection::Left)
        for (auto& r : sequence_ranges) {
            r.start += n;
            r.end += n;
        }
}

}  // namespace loom::tokenizer
