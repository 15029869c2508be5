// GradSync: data-parallel gradient reduction over the flat gradient buffer, in
// buckets launched while backward is still running (PyTorch DDP / Megatron
// param_and_grad_buffer, picotron bucket.py).
//
// Layout. Buckets tile [0, flat_numel) from the TOP of the buffer down, because
// backward finishes the last blocks (and the head) first: bucket 0 holds the
// highest offsets and is the first to become final. Every bucket but the
// bottom one has a length that is a multiple of 16 * dp_size, so it splits into
// dp equal chunks of a multiple of 16 elements; the bottom one is zero-padded
// to dp chunks through a staging buffer. Chunk r of every bucket belongs to dp rank r: that
// is the ZeRO shard (shard_pieces), contiguous inside each bucket, so the
// reduce-scatter of a bucket can start as soon as that bucket is final
// (Megatron's distributed optimizer does the same; one contiguous slice of the
// whole buffer per rank would need every gradient final before any transfer).
//
// Modes (ZeroStage), all on the dp group:
//   none        all_reduce(sum) of each bucket, in place: every rank ends with
//               the summed gradient in the flat buffer.
//   optimizer   ZeRO-1: reduce_scatter(sum) of each bucket on the step's last
//               micro-batch; the rank's summed chunks land in shard_grads().
//   gradients   ZeRO-2: reduce_scatter on EVERY micro-batch, added into
//               shard_grads(); then the flat buffer is zeroed, so the only
//               gradient state kept across micro-batches is the shard. (The
//               flat buffer stays allocated: backward writes it.) The wait is
//               deferred to the next begin_micro_batch, so the reduction of
//               micro-batch k runs during the forward of micro-batch k + 1.
// With gradient accumulation, modes none/optimizer reduce only on the last
// micro-batch; earlier backward calls just accumulate locally (DDP no_sync).
//
// Readiness. The model's grad-ready hook (Model::set_grad_ready_hook) reports
// final ranges; a bucket launches when every element in it has been reported.
// Ranks run the same model code, so they launch buckets in the same order (the
// collective rule). Whatever was not launched by the hook is launched, top
// down, when the micro-batch ends. Open MPI advances nonblocking collectives
// only inside MPI calls, so each hook call also tests the buckets in flight.
//
// Sparse rows. A model may keep the word-embedding lookup's gradient out of
// the flat buffer as rows (Model::set_sparse_embedding_grad), so that the
// table's range is final, and reduced, early in backward (set_sparse_rows).
// end_micro_batch then all-gathers the rows (summed per id on each rank
// first) after the last buckets, and finalize (ZeRO-2: the micro-batch's
// collect) adds every rank's rows, in rank order, into the reduced gradient:
// the flat buffer (none) or the rank's shard (ZeRO-1/2).
//
// Launch order. Collectives on one group must be posted in the same order on
// every rank, and a rank whose micro-batch had no labels skips backward and
// posts everything at end_micro_batch. So buckets launch in one fixed order,
// each only after the ones before it: top down, with the buckets inside the
// sparse table's range first when there is one (the order backward finishes them).
//
// Memory: the flat buffer and the sync's own (staging, shard) are the
// backend's, in the gradients' type (the table's activation type: f32 on the
// CPU, the compute type on a GPU), and the communicator must accept that
// memory (MPI host buffers, NCCL device ones). Sparse rows are host-only.
//
// Scaling: the caller passes loss_scale = 1 / (global label count) to
// Model::backward (the count is summed over dp before backward), so the sum
// over ranks IS the mean gradient; finalize() takes an extra factor for callers
// that scale afterwards. Sums are elementwise, so bucket sizes never change
// results; the grouping of terms across ranks and micro-batches does, at the
// rounding level (see tests/parallel/test_dp_equivalence.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "comm/comm.h"
#include "core/act_ptr.h"
#include "core/storage.h"
#include "nn/embedding.h"

namespace loom {

enum class ZeroStage : uint8_t {
    none = 0,       // replicated optimizer state and gradients (plain DDP)
    optimizer = 1,  // ZeRO-1: optimizer state sharded
    gradients = 2,  // ZeRO-2: optimizer state and gradients sharded
};
std::string_view zero_stage_name(ZeroStage z);

// One bucket of the flat gradient buffer. Chunk r is [begin + r*chunk, begin +
// (r+1)*chunk) clipped to [begin, end); only the bottom bucket may be clipped.
struct GradBucket {
    int64_t begin = 0, end = 0;  // elements of the flat buffer
    int64_t chunk = 0;           // elements per dp rank (a multiple of 16)

    int64_t numel() const { return end - begin; }
    bool padded(int dp_size) const { return chunk * dp_size != numel(); }
    int64_t chunk_begin(int r) const;
    int64_t chunk_end(int r) const;
};

// HF's ddp_bucket_cap_mb (MiB of fp32) as elements.
int64_t bucket_elems_from_mb(double mb);

// Buckets of about `bucket_elems` (rounded up to a multiple of 16 * dp_size),
// bucket 0 at the top of the buffer. Pure logic.
// Buckets over [first, flat_numel): below `first` the rows are frozen
// (LoRA's base, ParamTable::group_trainable) and nothing is reduced.
std::vector<GradBucket> grad_buckets_plan(int64_t flat_numel, int64_t bucket_elems, int dp_size,
                                          int64_t first = 0);

// One piece of a rank's ZeRO shard: the rank's chunk of one bucket.
struct ShardPiece {
    int64_t flat_begin = 0, flat_end = 0;  // valid elements in the flat buffer
    int64_t shard_begin = 0;               // where the chunk starts in the shard buffers
    int64_t chunk = 0;                     // chunk length (flat_end - flat_begin <= chunk)
};
// Rank r's pieces in bucket order; shard buffers hold sum(chunk) elements.
std::vector<ShardPiece> shard_pieces(const std::vector<GradBucket>& buckets, int rank);
int64_t shard_numel(const std::vector<GradBucket>& buckets);

struct GradSyncOptions {
    ZeroStage zero = ZeroStage::none;
    int64_t bucket_elems = 25 << 18;  // 25 MiB of fp32, HF's ddp_bucket_cap_mb default
    bool overlap = true;              // launch from the hook; false: at end of backward
    // Buckets launched after backward that may be in flight at once (0: all).
    // Open MPI's reduce-scatter and all-reduce take temporary buffers the
    // size of their input: with every bucket in flight that is another copy
    // of the whole gradient buffer per rank, which 8 ranks of a large model
    // cannot afford.
    int max_in_flight_at_end = 0;
    // The buckets start here (grad_buckets_plan's `first`).
    int64_t first_elem = 0;
};

// Counters for tests and the benchmark.
struct GradSyncStats {
    int64_t launched_by_hook = 0;  // buckets started while backward ran
    int64_t launched_at_end = 0;   // buckets started after backward
    double wait_s = 0;             // time blocked waiting for buckets (exposed comm)
    int64_t sparse_rows = 0;       // embedding rows exchanged (summed per id, all ranks)
};

class GradSync {
  public:
    // grads: the model's flat gradient buffer (flat_numel) in `backend`'s
    // memory; dp: the data-parallel group. Both must outlive this object.
    GradSync(ActPtr grads, int64_t flat_numel, Communicator& dp, const GradSyncOptions& options,
             Backend& backend = cpu_backend());
    ~GradSync();
    GradSync(const GradSync&) = delete;
    GradSync& operator=(const GradSync&) = delete;

    const std::vector<GradBucket>& buckets() const { return buckets_; }
    const std::vector<ShardPiece>& pieces() const { return pieces_; }
    ZeroStage zero() const { return opt_.zero; }
    int dp_rank() const { return dp_.rank(); }
    int dp_size() const { return dp_.size(); }
    Communicator& comm() const { return dp_; }

    // Start of an optimizer step: clears the shard accumulator and counters
    // (the caller zeroes the model's gradients).
    void begin_step();
    // Around each Model::backward: `last` = the step's last micro-batch.
    void begin_micro_batch(bool last);
    // The grad-ready hook: [begin, end) of the flat buffer is final.
    void grads_ready(int64_t begin, int64_t end);
    // After backward: launches what the hook did not launch, then (with
    // set_sparse_rows) the exchange of `rows`, the model's sparse embedding
    // rows (empty: this rank has none, as when it skipped backward).
    // ZeRO-2 collects the result (adds it into shard_grads(), zeroes the flat
    // buffer) at the next begin_micro_batch or finalize.
    void end_micro_batch(const EmbeddingGradRows& rows = {});
    // Waits for every bucket. Afterwards (times `scale`): mode none: the flat
    // buffer holds the sum over ranks; ZeRO-1/2: shard_grads() does, and the
    // flat buffer is stale (ZeRO-1: local sums; ZeRO-2: zeros).
    void finalize(double scale = 1.0);

    // The model keeps sparse rows for the table at [begin, end) of the flat
    // buffer: its whole buckets launch first and every reducing micro-batch
    // exchanges rows (end_micro_batch). Collective in effect: the same call on
    // every rank, outside a micro-batch.
    void set_sparse_rows(int64_t begin, int64_t end);
    bool sparse_rows() const { return sparse_rows_on_; }

    // (shard_numel) this rank's summed gradient chunks (ZeRO-1/2), chunk tails
    // zero, in the backend's memory and the gradients' type.
    ActPtr shard_grads() const {
        return shard_grads_ ? ActPtr(shard_grads_->data(), dtype_) : nullptr;
    }
    int64_t shard_size() const { return shard_n_; }
    DType dtype() const { return dtype_; }
    Backend& backend() const { return be_; }
    const GradSyncStats& stats() const { return stats_; }

  private:
    void launch(size_t b);
    void launch_remaining();
    void wait_all();
    // ZeRO-2: wait for the last micro-batch's reduce-scatter, add it into the
    // shard and zero the flat buffer.
    void collect_micro_batch();
    bool reducing() const;
    // Sparse rows: post the exchange (blocks for the row counts), then add
    // every rank's rows into the reduced gradients once it completes.
    void exchange_rows(const EmbeddingGradRows& rows);
    void add_rows();

    // n elements of the gradients' type at p (backend memory), on the backend.
    void zero(ActPtr p, int64_t n) const { be_.zero(p, size_t(n) * dtype_size(dtype_)); }

    ActPtr grads_;  // (flat_numel), not owned
    int64_t flat_numel_;
    Communicator& dp_;
    Backend& be_;
    DType dtype_;
    GradSyncOptions opt_;
    std::vector<GradBucket> buckets_;
    std::vector<ShardPiece> pieces_;       // this rank's, one per bucket
    std::vector<int64_t> covered_;         // (buckets) elements reported final
    std::map<int64_t, int64_t> reported_;  // begin -> end of ranges reported this backward
    std::vector<WorkPtr> work_;            // (buckets) in flight; null when idle
    std::vector<bool> launched_;           // (buckets) this micro-batch
    // Backend memory in the gradients' type: (dp * chunk) the padded bottom
    // bucket; (shard_numel) ZeRO-1/2's shard and ZeRO-2's per-micro-batch result.
    std::shared_ptr<Storage> staging_, shard_grads_, shard_recv_;
    int64_t shard_n_ = 0;
    bool in_backward_ = false, last_micro_ = false;
    bool micro_pending_ = false;  // ZeRO-2: a micro-batch's reduction not yet collected
    // The row exchange in flight: every rank sends `max_rows` (ids padded with -1).
    struct RowExchange {
        int64_t offset = 0, width = 0, max_rows = 0;
        std::vector<int64_t> order;               // (count) local rows by id
        std::vector<int64_t> counts;              // (dp) rows each rank sends
        std::vector<int64_t> send_ids, recv_ids;  // (max_rows), (dp * max_rows)
        std::vector<float> send_rows, recv_rows;  // (max_rows, width), (dp * max_rows, width)
        WorkPtr ids_work, rows_work;
        bool pending = false;
    };
    RowExchange rows_;
    bool sparse_rows_on_ = false;
    std::vector<size_t> launch_order_;    // bucket indices in launch order
    size_t next_launch_ = 0;              // position in launch_order_ of the next launch
    std::vector<size_t> pieces_by_flat_;  // indices of pieces_, by flat_begin ascending
    GradSyncStats stats_;
};

}  // namespace loom
