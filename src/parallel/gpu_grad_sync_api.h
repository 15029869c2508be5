// GpuGradSync: the data-parallel gradient reduction of the GPU executor
// (a DeviceStage), as the trainer sees it. The implementation (NCCL, overlapped
// with backward) lives in parallel/cuda/gpu_grad_sync.h and exists only in a
// CUDA + NCCL build; this header includes neither, so loom_train, which is
// compiled without CUDA, holds it through this interface and gets it from a
// TrainerOptions factory that `loom train` fills in.
//
// One optimizer step, every call on every dp rank in the same order:
//   for k in 0..n-1:
//       gpu.forward(mb[k]);
//       sync.begin_micro_batch(k == n - 1);
//       gpu.backward(1 / global_label_count);   // buckets start as they fill
//       sync.end_micro_batch();                 // the rest start here
//   sync.finalize();     // the compute stream waits for the sums (device side)
//   sync.wait();         // host: bounded by the collective timeout
//   gpu.grad_norm_sq(); gpu.step(lr, clip);      // on the summed gradients
// finalize() alone already orders the norm and AdamW after the reduction on
// the device; wait() is where a dead peer or an NCCL error surfaces, so call
// it before anything that blocks the host on the compute stream (the norm,
// the next forward's loss, a download), or a failed collective would hang
// there with no timeout.
//
// The loss is normalised by the global label count before backward, so the
// sum over ranks is the mean gradient: the reduction is a plain sum.
// ZeRO-0: an all-reduce; every rank applies the same update to the same
// summed gradients. ZeRO-1/2 (zero_stage): a reduce-scatter into this rank's
// shard (every micro-batch for ZeRO-2), which the executor updates alone
// before all-gathering the parameters; the sync hands the executor its shard
// and collectives (DeviceStage::set_shard), so the calls above do not change.
#pragma once

#include <cstdint>
#include <string>

namespace loom {

struct GpuGradSyncOptions {
    // MiB per bucket, counted in bytes of the gradient type (DDP's
    // bucket_cap_mb; the job's distribution.bucket_size_mb).
    double bucket_size_mb = 25.0;
    // Start buckets from the executor's grad-ready hook while backward runs;
    // false: all of them after backward (distribution.overlap_comm).
    bool overlap = true;
    // distribution.zero_stage: 0 all-reduce, 1 or 2 sharded (parallel/zero.h).
    int zero_stage = 0;
    // Optimizer state per parameter (AdamW, LAMB: 8; SGD: 0), for describe().
    int64_t state_bytes_per_param = 8;
};

struct GpuGradSyncStats {
    int64_t launched_by_hook = 0;  // buckets started while backward ran (last step)
    int64_t launched_at_end = 0;   // buckets started after backward (last step)
    double wait_s = 0;             // host time blocked in wait() (last step)
};

class GpuGradSync {
  public:
    virtual ~GpuGradSync() = default;

    virtual int dp_rank() const = 0;
    virtual int dp_size() const = 0;
    // Around each backward of a step; `last`: the step's last micro-batch.
    // Earlier micro-batches accumulate locally and reduce nothing (DDP's
    // no_sync). A rank with no labels in the last micro-batch skips backward
    // but still brackets it: its buckets then all start at end_micro_batch.
    virtual void begin_micro_batch(bool last) = 0;
    virtual void end_micro_batch() = 0;
    // Starts what has not started (a step whose micro-batches were not
    // bracketed reduces here) and makes the compute stream wait, on the
    // device, for every reduction. Does not block the host.
    virtual void finalize() = 0;
    // Blocks until every reduction posted so far is complete, polling up to
    // the dp group's collective timeout; throws (or aborts the job, per the
    // group's CommOptions) naming the rank and the bucket on a failure.
    virtual void wait() = 0;

    virtual const GpuGradSyncStats& stats() const = 0;
    // "2 ranks over NCCL, 4 buckets of up to 25 MiB (bf16), overlapped with backward"
    virtual std::string describe() const = 0;
};

}  // namespace loom
