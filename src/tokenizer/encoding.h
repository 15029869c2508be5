// Encoding: the output of Tokenizer::encode, and the token/offset types.
//
// All per-token arrays have one entry per token, padding included. Offsets are
// [start, end) in the token's own input (text or pair), given twice: in Unicode
// code points (`offsets`, as Python's tokenizers reports them) and in UTF-8
// bytes (`offsets_utf8`, as Rust's Tokenizer::encode reports them).
// truncate/merge_with/pad are ports of HF tokenizers' Encoding (v0.22.2),
// including how overflowing pieces are combined.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace loom::tokenizer {

struct Offsets {
    size_t start = 0;
    size_t end = 0;
    bool operator==(const Offsets& o) const { return start == o.start && end == o.end; }
};

// A model's output for one word: offsets are bytes inside that word.
struct Token {
    uint32_t id = 0;
    std::string value;
    Offsets offsets;
};

enum class TruncationDirection { Left, Right };
enum class PaddingDirection { Left, Right };

struct Encoding {
    std::vector<uint32_t> ids;                  // (N)
    std::vector<uint32_t> type_ids;             // (N)
    std::vector<std::string> tokens;            // (N)
    std::vector<int64_t> word_ids;              // (N) -1 = none
    std::vector<Offsets> offsets;               // (N) code points
    std::vector<Offsets> offsets_utf8;          // (N) UTF-8 bytes
    std::vector<uint32_t> special_tokens_mask;  // (N)
    std::vector<uint32_t> attention_mask;       // (N)
    std::vector<Encoding> overflowing;
    // Which token range belongs to which input sequence (HF's sequence_ranges).
    struct SequenceRange {
        size_t sequence;
        size_t start;
        size_t end;
    };
    std::vector<SequenceRange> sequence_ranges;

    size_t size() const { return ids.size(); }
    bool empty() const { return ids.empty(); }
    void reserve(size_t n);
    void push_back(uint32_t id, std::string token, Offsets chars, Offsets bytes, int64_t word, uint32_t type_id,
                   uint32_t special, uint32_t attention);

    // (N) 0/1 per token, -1 where the token belongs to no sequence.
    std::vector<int64_t> sequence_ids() const;
    void set_sequence_id(size_t sequence);
    void set_type_ids(uint32_t type_id) { type_ids.assign(ids.size(), type_id); }

    // Keeps max_len tokens, moving the rest into `overflowing` (stride tokens overlap).
    void truncate(size_t max_len, size_t stride, TruncationDirection direction);
    // Appends `pair`, combining both sides' overflowing pieces as HF does.
    void merge_with(const Encoding& pair, bool growing_offsets);
    void merge_with(Encoding&& pair, bool growing_offsets);
    static Encoding merge(std::vector<Encoding>& encodings, bool growing_offsets);
    void pad(size_t target_length, uint32_t pad_id, uint32_t pad_type_id, const std::string& pad_token,
             PaddingDirection direction);

private:
    Encoding slice_copy(size_t start, size_t stop) const;
};

}  // namespace loom::tokenizer
