// GradBucketQueue: which gradient buckets may start their reduction, and in
// what order, as backward reports final ranges of the flat gradient buffer.
//
// The GPU data-parallel reduction (parallel/cuda/gpu_grad_sync.h) posts one
// NCCL all-reduce per bucket from inside the executor's grad-ready hook. NCCL
// matches collectives by the order ranks post them, so every rank must post
// the buckets in one fixed order whatever the pattern of its reports: the
// queue releases bucket b only after buckets 0..b-1, and only once every
// element of b has been reported. Buckets tile the buffer from the top down
// (bucket 0 holds the highest offsets), because backward finishes the last
// layers and the head first (PyTorch DDP's reverse bucket order). Kept free
// of CUDA so the CPU build tests it.
//
// Boundaries sit at multiples of the bucket size counted from offset 0, so
// every bucket starts on an aligned address (NCCL moves aligned buffers
// faster); the top bucket takes the remainder and may be the smallest, which
// also lets the first reduction start early.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace loom {

struct FlatRange {
    int64_t begin = 0, end = 0;  // elements of the flat buffer
    int64_t numel() const { return end - begin; }
    bool operator==(const FlatRange&) const = default;
};

// Elements in `mb` MiB of elements of `elem_bytes` bytes (DDP's bucket_cap_mb
// counts bytes, so a bf16 bucket holds twice the elements of an fp32 one).
int64_t bucket_elems_for_bytes(double mb, int64_t elem_bytes);

// Buckets of `bucket_elems` rounded up to a multiple of `align` elements,
// bucket 0 at the top of [0, flat_numel). Empty for an empty buffer.
std::vector<FlatRange> grad_bucket_ranges(int64_t flat_numel, int64_t bucket_elems,
                                          int64_t align = 128);

class GradBucketQueue {
  public:
    // `buckets` must tile [0, flat_numel) top down (grad_bucket_ranges).
    GradBucketQueue(std::vector<FlatRange> buckets, int64_t flat_numel);

    const std::vector<FlatRange>& buckets() const { return buckets_; }
    // A new backward: nothing reported, nothing released.
    void reset();
    // [begin, end) of the buffer is final. Returns the buckets that may start
    // now, in bucket order. Throws loom::Error for a range outside the buffer
    // or one overlapping a range already reported since reset() (a bucket
    // must never start before all of it is final).
    std::vector<size_t> report(int64_t begin, int64_t end);
    // The buckets not yet released, in order (the end of backward: whatever
    // was not reported is final now). Afterwards every bucket is released.
    std::vector<size_t> flush();
    // Buckets released since reset().
    size_t released() const { return next_; }
    bool all_released() const { return next_ == buckets_.size(); }

  private:
    std::vector<FlatRange> buckets_;
    int64_t flat_numel_;
    std::vector<int64_t> covered_;         // (buckets) elements reported final
    std::map<int64_t, int64_t> reported_;  // begin -> end since reset()
    size_t next_ = 0;                      // first bucket not yet released
};

}  // namespace loom
