// Loader: batches of features for one data-parallel rank, prepared ahead on a
// background thread so the model never waits on data in steady state. Rows
// come from a RowSource: a FeatureSet in memory, or memory-mapped token shards
// (data/shard_dataset.h), of which a rank reads only its own rows.
//
// Sample order is a pure function of (data_seed, epoch, global index): the
// permutation of an epoch is computed from the seed alone, and rank r of dp
// takes its per-device share of each global batch, so any split of one global
// batch (accumulation x dp) sees the same samples. Masked-LM masks (80/10/10,
// fresh each epoch) are keyed by (seed, epoch, feature index, token position)
// through Philox, never by rank, thread or batch composition (data/collate.h).
// The position (epoch, batches consumed) is what a checkpoint stores; seek()
// resumes at the exact next sample.
//
// Batches: global micro-batch k of an epoch is rows [k*G, min((k+1)*G, N)) of
// the epoch's order (G = batch_size x dp_size, N features). Its n rows are
// split contiguously: rank r takes [r*n/dp, (r+1)*n/dp) (integer division), so
// a full batch gives every rank exactly batch_size rows (r*B .. (r+1)*B), and
// the short last batch (drop_last off) gives every rank its even share: ranks
// may get fewer rows than others, and with n < dp some get none. Every rank
// still gets a batch (B may be 0, then T = 0 and all arrays are empty), so all
// ranks call next() the same number of times and stay in step.
//
// Epochs: next() returns false once after the last batch of an epoch; the
// position is then (epoch + 1, 0) and the next call continues with that epoch
// (the producer has already started on it).
//
// Threads: one consumer (the trainer's thread) calls next()/seek()/position();
// a background producer fills a bounded queue of `prefetch` batches. It stops
// and is joined in seek() and in the destructor, also while it is blocked on
// a full queue. A producer error is rethrown by next().
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/model_inputs.h"
#include "data/features.h"
#include "data/row_source.h"

namespace loom {

namespace detail {
class MlmMasker;
}

struct TokenBatch {
    int64_t B = 0, T = 0;
    std::vector<int64_t> input_ids, attention_mask, token_type_ids;  // (B, T)
    std::vector<int64_t> labels;                                     // (B, T) or (B)
    std::vector<int64_t> start_positions, end_positions;             // (B) QA
    // (B, T) causal LM packed with document boundaries (Feature::position_ids;
    // padding counts as a document of its own); empty otherwise.
    std::vector<int64_t> position_ids;
    std::vector<int64_t> feature_index;   // (B) index into FeatureSet::features
    // Position in the epoch's order of row 0 (rows are consecutive positions);
    // unique per sample within a step, for dropout keys.
    int64_t first_global_sample = 0;
    // Labels in this batch as Model::forward counts them (LossSum::count):
    // masked tokens (masked LM), T_i - 1 per row (causal LM), labelled rows
    // (classification), 2 per row (QA: the start and the end term).
    int64_t label_count = 0;
    int64_t epoch = 0;                    // the epoch it belongs to
    ModelInputs inputs() const;           // views for Model::forward
};

struct LoaderOptions {
    int64_t batch_size = 8;          // per device, per micro-batch
    int64_t dp_rank = 0, dp_size = 1;
    bool shuffle = true;
    bool drop_last = false;
    uint64_t seed = 42;              // data_seed: keys the epoch order and the MLM masks
    int64_t pad_to_multiple_of = 0;
    int64_t pad_id = 0;
    // Masked LM.
    double mlm_probability = 0.15;
    int64_t mask_id = -1;
    int64_t vocab_size = 0;
    std::vector<int64_t> special_ids;  // never masked
    // Batches prepared ahead (at least 1). A trainer that fetches all of a
    // step's micro-batches before the first forward wants at least
    // gradient_accumulation_steps here; any depth is correct, a smaller one
    // only overlaps less. (global_label_count needs no fetching at all.)
    int prefetch = 4;
    // Pad to the longest row of a group of this many consecutive global
    // micro-batches (every rank's rows; groups start at the epoch's batch 0)
    // instead of this rank's own micro-batch. With the step's
    // gradient_accumulation_steps here, T is a function of the step's samples
    // only, so dropout keys (which count elements as sample x T x C) and
    // therefore the trained model do not depend on the dp x accumulation
    // split. 0 = HF's dynamic padding (longest row of this rank's batch).
    int64_t pad_span_batches = 0;
};

struct LoaderPosition {
    int64_t epoch = 0;
    int64_t batches = 0;  // global batches already consumed in this epoch
};

class Loader {
public:
    Loader(std::shared_ptr<const FeatureSet> data, LoaderOptions opts);
    Loader(std::shared_ptr<const RowSource> rows, LoaderOptions opts);
    ~Loader();
    Loader(const Loader&) = delete;
    Loader& operator=(const Loader&) = delete;
    // Global batches per epoch (global batch = batch_size x dp_size).
    int64_t batches_per_epoch() const;
    // Starts (or restarts) producing batches from `pos`.
    void seek(LoaderPosition pos);
    // The next batch of this rank; false at the end of the epoch.
    bool next(TokenBatch& out);
    LoaderPosition position() const;
    // Seconds next() spent blocked waiting for the producer.
    double wait_seconds() const;

    // The labels of global batches [from.batches, from.batches + n_batches)
    // of epoch from.epoch (clipped at the epoch's end), summed over every dp
    // rank: the global count a training step's loss is normalised by, equal to
    // the sum of label_count over those batches on all ranks. Computed from the
    // data alone (masks included), so no collective is needed. Thread-safe.
    int64_t global_label_count(LoaderPosition from, int64_t n_batches) const;
    // The epoch's sample order: position -> feature index. Thread-safe.
    std::shared_ptr<const std::vector<int64_t>> epoch_order(int64_t epoch) const;
    const LoaderOptions& options() const { return opts_; }

private:
    struct Item {
        TokenBatch batch;
        bool end_of_epoch = false;
    };
    struct Range {
        int64_t begin = 0, end = 0;  // positions in the epoch order
    };
    Range global_rows(int64_t batch) const;
    Range rank_rows(int64_t batch) const;
    int64_t batch_length(const std::vector<int64_t>& order, int64_t batch, Range mine) const;
    void make_batch(TokenBatch& out, int64_t epoch, int64_t batch) const;
    void start_producer();
    void stop_producer();
    void produce(LoaderPosition from);

    std::shared_ptr<const RowSource> rows_;
    LoaderOptions opts_;
    std::unique_ptr<const detail::MlmMasker> masker_;  // masked LM only
    int64_t n_ = 0;                       // rows
    int64_t global_batch_ = 0;            // batch_size x dp_size

    // Consumer state.
    LoaderPosition pos_;
    double wait_s_ = 0;

    // Shared with the producer (guarded by mu_).
    mutable std::mutex mu_;
    std::condition_variable cv_;  // queue changed or stop requested
    std::deque<Item> queue_;
    bool stop_ = false;
    std::exception_ptr error_;
    std::thread producer_;

    // The last orders computed (guarded by order_mu_).
    mutable std::mutex order_mu_;
    mutable std::deque<std::pair<int64_t, std::shared_ptr<const std::vector<int64_t>>>> orders_;
};

}  // namespace loom
