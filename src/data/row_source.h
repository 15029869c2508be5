// RowSource: the rows a Loader batches, wherever they live: tokenized in
// memory (a FeatureSet) or memory-mapped from token shards (shard_dataset.h).
//
// Invariants: size() and length(i) are known without reading any row (for
// shards they come from the index), so every rank can plan batches and pad
// lengths from metadata alone and read only its own rows. row() is safe to
// call from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/features.h"

namespace loom {

class RowSource {
  public:
    virtual ~RowSource() = default;
    virtual Task task() const = 0;
    virtual int64_t size() const = 0;             // rows
    virtual int64_t length(int64_t i) const = 0;  // tokens in row i (> 0)
    virtual int64_t total_tokens() const = 0;     // over every row
    // Row i. In-memory sources return their own Feature; others decode into
    // `scratch` and return it. Valid until the next call with that scratch.
    virtual const Feature& row(int64_t i, Feature& scratch) const = 0;
    // What to call it in messages ("shard folder data/shards", "train data").
    virtual std::string describe() const = 0;
};

// A view of an in-memory FeatureSet (rows returned by reference, no copy).
std::shared_ptr<const RowSource> feature_rows(std::shared_ptr<const FeatureSet> data);

}  // namespace loom
