// NcclZeroSync: ZeRO-1/2 data parallelism of the CUDA executor over NCCL.
//
// Layout: the CPU's (parallel/grad_sync.h grad_buckets_plan, shard_pieces):
// buckets tile the flat gradient buffer from the top down, chunk r of every
// bucket belongs to dp rank r, and a rank's shard is its chunks in bucket
// order. Only the bottom bucket may not split into dp equal chunks: it is
// copied into a zero-padded staging buffer before its reduce-scatter and
// gathered through one after. Checkpoints never see this layout (the executor
// gathers its state into global tensors).
//
// One step, all on the dp group, every collective ordered after the work
// already queued on the executor's compute stream (CommNccl's event), and the
// compute stream made to wait for it where it reads the result:
//   begin_micro_batch   first of the step: the fp32 shard accumulator zeroed;
//                       ZeRO-2: the previous micro-batch's reduce-scatter
//                       collected (acc += recv, flat gradients zeroed), so its
//                       transfer overlapped the forward enqueued before this call
//   grads_ready         buckets reduce-scattered (compute type) into recv as
//                       backward finishes them (ZeRO-1: last micro-batch only;
//                       ZeRO-2: every one)
//   end_micro_batch     the rest of the buckets
//   finalize            the last collect: acc holds this rank's summed chunks
//   executor grad_norm_sq / step: all_reduce_sum of partial norms (and LAMB's
//                       per-row sums); the shard update; gather_params: the
//                       master weights' chunks copied into acc (consumed) and
//                       all-gathered into every rank's master weights
// wait() bounds every posted Work by the group's timeout.
#include "parallel/cuda/gpu_zero_sync.h"

#if defined(LOOM_HAVE_NCCL)

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "comm/cuda/comm_nccl.h"
#include "core/check.h"
#include "ops/cuda/accumulate_cuda.h"
#include "parallel/device_stage.h"
#include "parallel/grad_bucket_queue.h"
#include "parallel/grad_sync.h"

namespace loom {

namespace {

std::vector<FlatRange> ranges_of(const std::vector<GradBucket>& buckets) {
    std::vector<FlatRange> out;
    for (const GradBucket& b : buckets) out.push_back({b.begin, b.end});
    return out;
}

void* device_zeros(size_t bytes) {
    void* p = nullptr;
    LOOM_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
    LOOM_CUDA_CHECK(cudaMemset(p, 0, std::max<size_t>(bytes, 1)));
    return p;
}

double mib(int64_t bytes) {
    return double(bytes) / double(1 << 20);
}

class NcclZeroSync final : public GpuGradSync {
  public:
    NcclZeroSync(std::unique_ptr<CommNccl> comm, DeviceStage& model, int device,
                 const GpuGradSyncOptions& options)
        : comm_(std::move(comm)),
          model_(model),
          opt_(options),
          ctx_(device, static_cast<cudaStream_t>(model.compute_stream())),
          grads_(static_cast<char*>(model.grads_device())),
          dtype_(model.grad_dtype()),
          esize_(dtype_size(dtype_)),
          buckets_(grad_buckets_plan(
              model.flat_numel(), bucket_elems_for_bytes(options.bucket_size_mb, int64_t(esize_)),
              comm_->size())),
          pieces_(shard_pieces(buckets_, comm_->rank())),
          queue_(ranges_of(buckets_), model.flat_numel()) {
        LOOM_CHECK(options.zero_stage == 1 || options.zero_stage == 2,
                   "GPU ZeRO: stage {} (1 or 2 expected)", options.zero_stage);
        LOOM_CHECK(grads_ != nullptr || model.flat_numel() == 0,
                   "GPU data parallel over an executor without a gradient buffer");
        LOOM_CHECK(dtype_ == DType::f32 || dtype_ == DType::bf16 || dtype_ == DType::f16,
                   "GPU ZeRO: gradients of type {} (f32, bf16 or f16 expected)",
                   dtype_name(dtype_));
        numel_ = shard_numel(buckets_);
        recv_ = static_cast<char*>(device_zeros(size_t(numel_) * esize_));
        acc_ = static_cast<float*>(device_zeros(size_t(numel_) * sizeof(float)));
        for (const GradBucket& b : buckets_)
            if (b.padded(comm_->size())) staging_elems_ = b.chunk * comm_->size();
        // Tails stay zero: copies fill [0, numel) of the bucket only.
        stage_grads_ = static_cast<char*>(device_zeros(size_t(staging_elems_) * esize_));
        stage_f32_ = static_cast<float*>(device_zeros(size_t(staging_elems_) * sizeof(float)));
        model_.set_grad_ready_hook([this](int64_t b, int64_t e) { grads_ready(b, e); });
        CudaShard s;
        for (const ShardPiece& p : pieces_)
            s.chunks.push_back({p.flat_begin, p.flat_end, p.shard_begin});
        s.numel = numel_;
        s.grads = acc_;
        // The norms and the checkpoint's state are read by the host right
        // after: it waits here, bounded by the group's timeout, rather than
        // block on the compute stream behind a collective that may never end.
        s.all_reduce_sum = [this](double* sums, int64_t n) {
            all_reduce_sum(sums, n);
            wait();
        };
        s.gather_params = [this](float* master) { gather_params(master); };
        s.gather_flat = [this](const float* shard, float* full) {
            gather_flat(shard, full);
            wait();
        };
        model_.set_shard(std::move(s));
    }

    ~NcclZeroSync() override {
        model_.set_grad_ready_hook({});
        model_.set_shard({});  // detach: the collectives go with this object
        work_.clear();
        comm_.reset();  // drains the comm stream (bounded) before the buffers go
        (void)cudaStreamSynchronize(ctx_.stream());
        for (void* p : {static_cast<void*>(recv_), static_cast<void*>(acc_),
                        static_cast<void*>(stage_grads_), static_cast<void*>(stage_f32_)})
            (void)cudaFree(p);
    }

    NcclZeroSync(const NcclZeroSync&) = delete;
    NcclZeroSync& operator=(const NcclZeroSync&) = delete;

    int dp_rank() const override { return comm_->rank(); }
    int dp_size() const override { return comm_->size(); }

    void begin_micro_batch(bool last) override {
        LOOM_CHECK(!in_backward_,
                   "GPU gradient sync: begin_micro_batch twice without end_micro_batch");
        if (!step_open_) open_step();
        collect();  // ZeRO-2: the previous micro-batch's reduction
        last_ = last;
        in_backward_ = true;
        if (reducing()) queue_.reset();
    }

    void end_micro_batch() override {
        LOOM_CHECK(in_backward_, "GPU gradient sync: end_micro_batch without begin_micro_batch");
        in_backward_ = false;
        if (!reducing()) return;
        // Backward is fully enqueued: whatever the hook did not start is final.
        for (size_t b : queue_.flush()) {
            launch(b);
            ++stats_.launched_at_end;
        }
        pending_ = true;
    }

    void finalize() override {
        LOOM_CHECK(!in_backward_, "GPU gradient sync: finalize inside a micro-batch");
        if (!step_open_) {
            // Nothing bracketed this step's backward: reduce everything now.
            open_step();
            queue_.reset();
            for (size_t b : queue_.flush()) {
                launch(b);
                ++stats_.launched_at_end;
            }
            pending_ = true;
        }
        LOOM_CHECK(pending_ || opt_.zero_stage == 2,
                   "GPU ZeRO-1: finalize without the step's last micro-batch (begin_micro_batch "
                   "with last = true)");
        collect();
        step_open_ = false;
    }

    void wait() override {
        const auto t0 = std::chrono::steady_clock::now();
        const bool any = !work_.empty();
        std::vector<std::pair<std::string, WorkPtr>> work = std::move(work_);
        work_.clear();
        for (auto& [what, w] : work) {
            try {
                w->wait();
            } catch (const Error& e) {
                LOOM_FAIL("data-parallel (ZeRO-{}) {} failed: {}", opt_.zero_stage, what, e.what());
            }
        }
        if (any)
            stats_.wait_s +=
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }

    const GpuGradSyncStats& stats() const override { return stats_; }

    std::string describe() const override {
        const int dp = dp_size();
        const size_t n = buckets_.size();
        const double bucket_mib =
            n == 0 ? 0.0 : double(buckets_.front().numel()) * double(esize_) / double(1 << 20);
        const int64_t flat = model_.flat_numel();
        const int64_t sb = opt_.state_bytes_per_param;
        const int64_t state_full = flat * sb, state_shard = numel_ * sb;
        const int64_t buffers = numel_ * int64_t(esize_ + sizeof(float)) +
                                staging_elems_ * int64_t(esize_ + sizeof(float));
        const int64_t saved = state_full - state_shard - buffers;
        return fmt::format(
            "{} ranks over NCCL, ZeRO-{}: gradients ({}) reduce-scattered in {} bucket(s) of up "
            "to {:.1f} MiB{}{}; optimizer state {:.1f} MiB per rank instead of {:.1f} MiB, shard "
            "buffers {:.1f} MiB ({} {:.1f} MiB per rank vs ZeRO-0){}",
            dp, opt_.zero_stage, dtype_name(dtype_), n, bucket_mib,
            opt_.zero_stage == 2 ? " every micro-batch" : "",
            opt_.overlap ? ", started while backward runs" : ", after backward", mib(state_shard),
            mib(state_full), mib(buffers), saved >= 0 ? "saves" : "costs", mib(std::abs(saved)),
            opt_.zero_stage == 2 ? "; the flat gradient buffer stays allocated as backward's "
                                   "workspace"
                                 : "");
    }

  private:
    bool reducing() const { return last_ || opt_.zero_stage == 2; }

    void open_step() {
        // The previous step's Works: normally waited already; a caller that
        // skipped wait() surfaces their errors here.
        wait();
        stats_ = {};
        // The previous step's all-gather read acc on the comm stream; the
        // executor's step made the compute stream wait for it.
        LOOM_CUDA_CHECK(
            cudaMemsetAsync(acc_, 0, size_t(std::max<int64_t>(numel_, 1)) * 4, ctx_.stream()));
        step_open_ = true;
        pending_ = false;
    }

    // The last reduce-scatter into the fp32 accumulator; the flat gradient
    // buffer zeroed for the next backward (ZeRO-2) or the step (ZeRO-1: the
    // executor zeroes it again, stale either way).
    void collect() {
        if (!pending_) return;
        pending_ = false;
        comm_->make_compute_wait();
        switch (dtype_) {
            case DType::f32:
                accumulate_f32_cuda(acc_, reinterpret_cast<const float*>(recv_), numel_, ctx_);
                break;
            case DType::bf16:
                accumulate_f32_cuda(acc_, reinterpret_cast<const __nv_bfloat16*>(recv_), numel_,
                                    ctx_);
                break;
            default:
                accumulate_f32_cuda(acc_, reinterpret_cast<const __half*>(recv_), numel_, ctx_);
                break;
        }
        LOOM_CUDA_CHECK(
            cudaMemsetAsync(grads_, 0, size_t(model_.flat_numel()) * esize_, ctx_.stream()));
    }

    void grads_ready(int64_t begin, int64_t end) {
        LOOM_CHECK(in_backward_,
                   "the GPU executor reported gradients final outside "
                   "begin_micro_batch/end_micro_batch");
        if (!reducing() || !opt_.overlap) return;
        for (size_t b : queue_.report(begin, end)) {
            launch(b);
            ++stats_.launched_by_hook;
        }
    }

    // reduce_scatter(sum) of bucket b; this rank's chunk lands at its shard
    // offset in recv. Chunks of other buckets sit elsewhere in recv, so
    // buckets in flight never share bytes.
    void launch(size_t b) {
        const GradBucket& k = buckets_[b];
        const ShardPiece& p = pieces_[b];
        const char* send = grads_ + size_t(k.begin) * esize_;
        if (k.padded(dp_size())) {
            // Enqueued on the compute stream after the bucket's gradients; the
            // previous reader of the staging buffer (the last reduce-scatter)
            // was waited for by collect() or the step before this backward.
            LOOM_CUDA_CHECK(cudaMemcpyAsync(stage_grads_, send, size_t(k.numel()) * esize_,
                                            cudaMemcpyDeviceToDevice, ctx_.stream()));
            send = stage_grads_;
        }
        work_.emplace_back(fmt::format("gradient bucket {} of {} (elements [{}, {}))", b,
                                       buckets_.size(), k.begin, k.end),
                           comm_->reduce_scatter(send, recv_ + size_t(p.shard_begin) * esize_,
                                                 p.chunk, dtype_, ReduceOp::sum));
    }

    void all_reduce_sum(double* sums, int64_t n) {
        work_.emplace_back("sum of partial norms",
                           comm_->all_reduce(sums, n, DType::f64, ReduceOp::sum));
        comm_->make_compute_wait();
    }

    // Every rank's (numel) shard into a (flat_numel) device buffer.
    void gather_flat(const float* shard, float* full) {
        for (size_t b = 0; b < buckets_.size(); ++b) {
            const GradBucket& k = buckets_[b];
            const ShardPiece& p = pieces_[b];
            const bool padded = k.padded(dp_size());
            float* recv = padded ? stage_f32_ : full + k.begin;
            work_.emplace_back(fmt::format("all-gather of bucket {} of {}", b, buckets_.size()),
                               comm_->all_gather(shard + p.shard_begin, recv, p.chunk, DType::f32));
            if (padded) {
                comm_->make_compute_wait();
                LOOM_CUDA_CHECK(cudaMemcpyAsync(full + k.begin, stage_f32_,
                                                size_t(k.numel()) * sizeof(float),
                                                cudaMemcpyDeviceToDevice, ctx_.stream()));
            }
        }
        comm_->make_compute_wait();
    }

    // The master weights' chunks staged in acc (the step has consumed the
    // gradients), then gathered into every rank's master weights.
    void gather_params(float* master) {
        for (const ShardPiece& p : pieces_)
            if (p.flat_end > p.flat_begin)
                LOOM_CUDA_CHECK(cudaMemcpyAsync(acc_ + p.shard_begin, master + p.flat_begin,
                                                size_t(p.flat_end - p.flat_begin) * sizeof(float),
                                                cudaMemcpyDeviceToDevice, ctx_.stream()));
        gather_flat(acc_, master);
    }

    std::unique_ptr<CommNccl> comm_;
    DeviceStage& model_;
    GpuGradSyncOptions opt_;
    CudaContext ctx_;  // the executor's compute stream (not owned)
    char* grads_;      // (flat_numel) of dtype_, the executor's
    DType dtype_;
    size_t esize_;
    std::vector<GradBucket> buckets_;
    std::vector<ShardPiece> pieces_;  // this rank's, one per bucket
    GradBucketQueue queue_;
    int64_t numel_ = 0;            // shard elements
    char* recv_ = nullptr;         // (numel) dtype_: one micro-batch's reduce-scatter
    float* acc_ = nullptr;         // (numel) the reduced gradient shard, summed in fp32
    int64_t staging_elems_ = 0;    // dp * chunk of the padded bottom bucket (0: none)
    char* stage_grads_ = nullptr;  // (staging_elems) dtype_: its zero-padded gradients
    float* stage_f32_ = nullptr;   // (staging_elems) its gathered fp32 values
    std::vector<std::pair<std::string, WorkPtr>> work_;  // posted, not yet waited
    bool in_backward_ = false, last_ = false;
    bool step_open_ = false;  // a micro-batch of this step began; finalize not yet called
    bool pending_ = false;    // a reduce-scatter into recv not yet collected
    GpuGradSyncStats stats_;
};

}  // namespace

std::unique_ptr<GpuGradSync> make_nccl_zero_sync(std::unique_ptr<CommNccl> comm, DeviceStage& model,
                                                 int device, const GpuGradSyncOptions& options) {
    return std::make_unique<NcclZeroSync>(std::move(comm), model, device, options);
}

}  // namespace loom

#endif  // LOOM_HAVE_NCCL
