// ShardWriter: sequences of token ids -> a shard folder (data/shard_format.h).
//
// Sequences are appended in order; a shard is closed once its ids reach
// shard_bytes, at a sequence boundary, and written atomically (temporary file,
// rename). index.json is written last by finish(), so a folder without it is
// an unfinished run, never a silently short data set. Documents are given as
// the offset of their first token in the stream of all sequence tokens written
// so far or later (for packed sequences a document may start mid-sequence);
// each lands in the shard that holds that token, and starts past the last
// token written (a dropped tail) are not recorded.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/task.h"

namespace loom {

struct ShardWriterOptions {
    Task task = Task::masked_lm;
    int64_t vocab_size = 0;  // ids must be below it; picks uint16 or uint32
    int64_t max_seq_length = 0;
    bool sentence_order = false;                 // sequences carry segment pairs and SOP labels
    std::string tokenizer_hash;                  // shard::fnv1a64 of tokenizer.json, hex
    uint64_t shard_bytes = uint64_t(256) << 20;  // ids per shard, before closing it
    nlohmann::json extra = nlohmann::json::object();  // merged into index.json
};

class ShardWriter {
  public:
    ShardWriter(std::string dir, ShardWriterOptions options);
    // pair_start: index of segment B's first token (0 = one segment);
    // sop_label: 0 in order, 1 swapped (sentence_order only).
    void add_sequence(std::span<const uint32_t> ids, uint32_t pair_start = 0,
                      uint8_t sop_label = 0);
    void add_document_start(uint64_t token_offset);
    // Closes the last shard and writes index.json; returns its content.
    nlohmann::json finish();

    uint64_t sequences() const { return n_sequences_; }
    uint64_t tokens() const { return n_tokens_; }
    int id_bytes() const { return id_bytes_; }

  private:
    void flush_shard();
    nlohmann::json folder_fields() const;

    std::string dir_;
    ShardWriterOptions opt_;
    int id_bytes_ = 2;
    // The open shard.
    std::vector<uint8_t> ids_;          // (tokens * id_bytes)
    std::vector<uint64_t> seqs_{0};     // (sequences + 1) token offsets
    std::vector<uint32_t> pairs_;       // (sequences)
    std::vector<uint8_t> sop_;          // (sequences)
    std::vector<uint64_t> doc_starts_;  // global token offsets not yet placed, ascending
    uint64_t shard_first_token_ = 0;    // global offset of the open shard's first token
    // Totals.
    uint64_t n_sequences_ = 0, n_tokens_ = 0, n_documents_ = 0;
    nlohmann::json shards_ = nlohmann::json::array();
};

// Hex form of shard::fnv1a64 of a file's bytes (the tokenizer hash).
std::string tokenizer_hash_hex(const std::string& path);

}  // namespace loom
