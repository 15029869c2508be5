// ShardDataset: a shard folder written by `loom preprocess` as a RowSource
// for the Loader, memory-mapped (data/shard_format.h for the bytes).
//
// Opening reads index.json and each shard's fixed header and index sections
// (sequence and document offsets), and checks them against each other and
// against the file sizes: a truncated or corrupt shard is an error naming the
// shard file and the byte offset where it goes wrong. Token ids are only
// touched when a row is read, so a data-parallel rank pages in only the rows
// it trains on; each id is checked against vocab_size as it is decoded.
//
// Rows are the folder's sequences in global order (shard 0 first). A row's
// type ids are 0, or 1 from the pair start on (sentence-order shards), and
// Feature::label holds the sentence-order label there (-100 otherwise).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/row_source.h"
#include "data/shard_source.h"

namespace loom {

struct ShardFolderInfo {
    std::string path;
    Task task = Task::masked_lm;
    int id_bytes = 2;
    int64_t vocab_size = 0;
    int64_t max_seq_length = 0;
    bool sentence_order = false;
    std::string tokenizer_hash;
    int64_t sequences = 0, tokens = 0, documents = 0;
    std::vector<std::string> shard_files;
    nlohmann::json index;  // index.json as read
};

// True when `path` is a folder holding index.json of the shard format.
bool is_shard_folder(const std::string& path);

// Opens one shard's bytes; the default maps local files.
using ShardOpener = std::function<std::unique_ptr<ShardSource>(const std::string& path)>;

class ShardDataset : public RowSource {
  public:
    static std::shared_ptr<const ShardDataset> open(const std::string& dir,
                                                    const ShardOpener& opener = open_shard_source);
    ~ShardDataset() override;

    Task task() const override { return info_.task; }
    int64_t size() const override { return info_.sequences; }
    int64_t length(int64_t i) const override;
    int64_t total_tokens() const override { return info_.tokens; }
    const Feature& row(int64_t i, Feature& scratch) const override;
    std::string describe() const override { return "shard folder " + info_.path; }

    const ShardFolderInfo& info() const { return info_; }
    // Token offsets of the documents' first tokens in shard `k` (tests, tools).
    std::vector<uint64_t> document_offsets(size_t k) const;
    // Global index of the first sequence of shard `k`.
    int64_t first_sequence(size_t k) const { return first_seq_[k]; }

    struct Shard;  // one open shard (shard_dataset.cpp)

  private:
    ShardDataset() = default;
    ShardFolderInfo info_;
    std::vector<std::unique_ptr<Shard>> shards_;
    std::vector<int64_t> first_seq_;  // (shards + 1) global index of each shard's first row
};

}  // namespace loom
