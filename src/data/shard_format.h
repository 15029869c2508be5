// Token shards: the binary layout `loom preprocess` writes and the trainer
// memory-maps (docs/shards.md has the user-level description).
//
// A shard folder holds `index.json` (the folder header) and shard files
// `shard-00000.bin`, `shard-00001.bin`, ... Sequences are numbered globally in
// shard order: shard k holds sequences [first_k, first_k + n_k).
//
// One shard file, all integers little-endian, every section 8-byte aligned:
//   offset  size   field
//   0       8      magic "LOOMSHRD"
//   8       4      u32 format version (k_shard_version = 1)
//   12      4      u32 id_bytes: 2 (uint16 ids, vocabularies up to 65536) or 4 (uint32)
//   16      8      u64 n_sequences
//   24      8      u64 n_tokens        (sum of sequence lengths)
//   32      8      u64 n_documents     (documents whose first token is in this shard)
//   40      8      u64 json_bytes      (length of the JSON header below)
//   48      8      u64 file_bytes      (the whole file: a shorter file is truncated)
//   56      4      u32 flags           (bit 0: segment pairs present)
//   60      4      u32 reserved (0)
//   64      J      JSON header (task, tokenizer hash, counts, dtype, version, ...),
//                  zero-padded to a multiple of 8
//   ids     n_tokens * id_bytes        token ids of every sequence, back to back,
//                                      zero-padded to a multiple of 8
//   seqs    (n_sequences + 1) * u64    token offset of each sequence in `ids`;
//                                      the last entry is n_tokens
//   docs    (n_documents + 1) * u64    token offset in `ids` of each document's
//                                      first token; the last entry is n_tokens
//   pairs   n_sequences * u32          (flag bit 0) where segment B starts in the
//                                      sequence: token_type_ids are 0 before, 1 from there
//   sop     n_sequences * u8           (flag bit 0) sentence-order label: 0 = A then
//                                      B as written, 1 = swapped; zero-padded to 8
//
// Invariants checked when a shard is opened (errors name the shard and the
// byte offset): the magic and version, file_bytes equal to the real size and
// to the size the counts imply, sequence and document offsets non-decreasing
// from 0 to n_tokens, every sequence non-empty, pair starts inside their
// sequence. Ids are checked against the folder's vocab_size as rows are read.
#pragma once

#include <cstdint>
#include <string_view>

namespace loom::shard {

inline constexpr std::string_view k_magic = "LOOMSHRD";
inline constexpr uint32_t k_version = 1;
inline constexpr uint32_t k_flag_pairs = 1;
inline constexpr uint64_t k_fixed_bytes = 64;
inline constexpr std::string_view k_index_name = "index.json";
inline constexpr std::string_view k_format_name = "loom-token-shards";

inline constexpr uint64_t align8(uint64_t n) {
    return (n + 7) & ~uint64_t(7);
}

// Byte offsets of the sections, from the fixed header's counts.
struct ShardLayout {
    uint64_t ids = 0, seqs = 0, docs = 0, pairs = 0, sop = 0, end = 0;
};

inline ShardLayout shard_layout(uint64_t json_bytes, uint32_t id_bytes, uint64_t n_sequences,
                                uint64_t n_tokens, uint64_t n_documents, bool pairs) {
    ShardLayout l;
    l.ids = k_fixed_bytes + align8(json_bytes);
    l.seqs = l.ids + align8(n_tokens * id_bytes);
    l.docs = l.seqs + (n_sequences + 1) * 8;
    l.pairs = l.docs + (n_documents + 1) * 8;
    l.sop = l.pairs + (pairs ? n_sequences * 4 : 0);
    l.end = l.sop + (pairs ? align8(n_sequences) : 0);
    return l;
}

// FNV-1a over bytes, as 16 hex digits: the tokenizer hash in headers.
uint64_t fnv1a64(std::string_view bytes);

}  // namespace loom::shard
