// Loader: batches of features for one data-parallel rank, prepared ahead on a
// background thread so the model never waits on data in steady state.
//
// Sample order is a pure function of (data_seed, epoch, global index): the
// permutation of an epoch is computed from the seed alone, and rank r of dp
// takes its per-device share of each global batch, so any split of one global
// batch (accumulation x dp) sees the same samples. Masked-LM masks (80/10/10,
// fresh each epoch) are keyed by (seed, epoch, global sample index) through
// Philox, never by rank or thread. The position (epoch, batches consumed) is
// what a checkpoint stores; seek() resumes at the exact next sample.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "data/features.h"
#include "models/model.h"

namespace loom {

struct TokenBatch {
    int64_t B = 0, T = 0;
    std::vector<int64_t> input_ids, attention_mask, token_type_ids;  // (B, T)
    std::vector<int64_t> labels;                                     // (B, T) or (B)
    std::vector<int64_t> start_positions, end_positions;             // (B) QA
    std::vector<int64_t> feature_index;   // (B) index into FeatureSet::features
    int64_t first_global_sample = 0;      // global index of row 0 (dropout keys)
    int64_t label_count = 0;              // labelled tokens (LM) or samples in this batch
    ModelInputs inputs() const;           // views for Model::forward
};

struct LoaderOptions {
    int64_t batch_size = 8;          // per device, per micro-batch
    int64_t dp_rank = 0, dp_size = 1;
    bool shuffle = true;
    bool drop_last = false;
    uint64_t seed = 42;              // data_seed
    int64_t pad_to_multiple_of = 0;
    int64_t pad_id = 0;
    // Masked LM.
    double mlm_probability = 0.15;
    int64_t mask_id = -1;
    int64_t vocab_size = 0;
    std::vector<int64_t> special_ids;  // never masked
    int prefetch = 4;                  // batches prepared ahead
};

struct LoaderPosition {
    int64_t epoch = 0;
    int64_t batches = 0;  // global batches already consumed in this epoch
};

class Loader {
public:
    Loader(std::shared_ptr<const FeatureSet> data, LoaderOptions opts);
    ~Loader();
    // Global batches per epoch (global batch = batch_size x dp_size).
    int64_t batches_per_epoch() const;
    // Starts (or restarts) producing batches from `pos`.
    void seek(LoaderPosition pos);
    // The next batch of this rank; false at the end of the epoch.
    bool next(TokenBatch& out);
    LoaderPosition position() const;
    // Seconds next() spent blocked waiting for the producer.
    double wait_seconds() const;
};

}  // namespace loom
