// NcclGradSync: GpuGradSync over CommNccl (see gpu_grad_sync.h for the overlap).
#include "parallel/cuda/gpu_grad_sync.h"

#if defined(LOOM_HAVE_NCCL)

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "comm/cuda/comm_nccl.h"
#include "core/check.h"
#include "parallel/cuda/gpu_zero_sync.h"
#include "parallel/device_stage.h"
#include "parallel/grad_bucket_queue.h"

namespace loom {

namespace {

class NcclGradSync final : public GpuGradSync {
  public:
    NcclGradSync(std::unique_ptr<CommNccl> comm, DeviceStage& model,
                 const GpuGradSyncOptions& options)
        : comm_(std::move(comm)),
          model_(model),
          opt_(options),
          grads_(static_cast<char*>(model.grads_device())),
          dtype_(model.grad_dtype()),
          queue_(grad_bucket_ranges(
                     model.flat_numel(),
                     bucket_elems_for_bytes(options.bucket_size_mb, int64_t(dtype_size(dtype_)))),
                 model.flat_numel()) {
        LOOM_CHECK(grads_ != nullptr || model.flat_numel() == 0,
                   "GPU data parallel over an executor without a gradient buffer");
        // f16 (loss-scaled): an overflow becomes inf in the sum on every
        // rank alike, so the scaler skips the step everywhere.
        LOOM_CHECK(dtype_ == DType::f32 || dtype_ == DType::bf16 || dtype_ == DType::f16,
                   "GPU data parallel: gradients of type {} (f32, bf16 or f16 expected)",
                   dtype_name(dtype_));
        work_.resize(queue_.buckets().size());
        model_.set_grad_ready_hook([this](int64_t b, int64_t e) { grads_ready(b, e); });
    }

    ~NcclGradSync() override {
        model_.set_grad_ready_hook({});
        // Unfinished Works wait for themselves (bounded by the timeout);
        // then the communicator drains its stream.
        work_.clear();
    }

    NcclGradSync(const NcclGradSync&) = delete;
    NcclGradSync& operator=(const NcclGradSync&) = delete;

    int dp_rank() const override { return comm_->rank(); }
    int dp_size() const override { return comm_->size(); }

    void begin_micro_batch(bool last) override {
        LOOM_CHECK(!in_backward_,
                   "GPU gradient sync: begin_micro_batch twice without end_micro_batch");
        if (last && !step_open_) {
            // The previous step's Works: normally waited already; a caller
            // that skipped wait() surfaces their errors here.
            wait();
            stats_ = {};
            queue_.reset();
            step_open_ = true;
        }
        in_backward_ = true;
        last_ = last;
    }

    void end_micro_batch() override {
        LOOM_CHECK(in_backward_, "GPU gradient sync: end_micro_batch without begin_micro_batch");
        in_backward_ = false;
        if (!last_) return;
        // Backward is fully enqueued: whatever the hook did not start is final.
        for (size_t b : queue_.flush()) {
            launch(b);
            ++stats_.launched_at_end;
        }
    }

    void finalize() override {
        LOOM_CHECK(!in_backward_, "GPU gradient sync: finalize inside a micro-batch");
        if (!step_open_) {
            // Nothing bracketed this step's backward: reduce everything now.
            wait();
            stats_ = {};
            queue_.reset();
        }
        for (size_t b : queue_.flush()) {
            launch(b);
            ++stats_.launched_at_end;
        }
        step_open_ = false;
        // Device-side: the norm and AdamW, enqueued next on the compute
        // stream, read the summed buffer.
        comm_->make_compute_wait();
    }

    void wait() override {
        const auto t0 = std::chrono::steady_clock::now();
        bool any = false;
        for (size_t b = 0; b < work_.size(); ++b) {
            if (!work_[b]) continue;
            any = true;
            WorkPtr w = std::move(work_[b]);
            try {
                w->wait();
            } catch (const Error& e) {
                const FlatRange& k = queue_.buckets()[b];
                LOOM_FAIL("data-parallel gradient bucket {} of {} (elements [{}, {})) failed: {}",
                          b, work_.size(), k.begin, k.end, e.what());
            }
        }
        if (any)
            stats_.wait_s +=
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }

    const GpuGradSyncStats& stats() const override { return stats_; }

    std::string describe() const override {
        const size_t n = queue_.buckets().size();
        const double mib = n == 0 ? 0.0
                                  : double(queue_.buckets().back().numel()) *
                                        double(dtype_size(dtype_)) / double(1 << 20);
        return fmt::format(
            "{} ranks over NCCL, gradients ({}) all-reduced in {} bucket(s) of up to {:.1f} MiB{}",
            dp_size(), dtype_name(dtype_), n, mib,
            opt_.overlap ? ", started while backward runs" : ", after backward");
    }

  private:
    void grads_ready(int64_t begin, int64_t end) {
        LOOM_CHECK(in_backward_,
                   "the GPU executor reported gradients final outside "
                   "begin_micro_batch/end_micro_batch");
        // Accumulating: reduced with the step's last micro-batch. No overlap:
        // end_micro_batch starts every bucket.
        if (!last_ || !opt_.overlap) return;
        for (size_t b : queue_.report(begin, end)) {
            launch(b);
            ++stats_.launched_by_hook;
        }
    }

    void launch(size_t b) {
        LOOM_ASSERT(!work_[b], "gradient bucket {} posted while its last reduction is pending", b);
        const FlatRange& k = queue_.buckets()[b];
        // In place; CommNccl orders it after everything the executor has
        // enqueued on the compute stream so far (the bucket's gradients).
        work_[b] = comm_->all_reduce(grads_ + size_t(k.begin) * dtype_size(dtype_), k.numel(),
                                     dtype_, ReduceOp::sum);
    }

    std::unique_ptr<CommNccl> comm_;
    DeviceStage& model_;
    GpuGradSyncOptions opt_;
    char* grads_;  // (flat_numel) of dtype_, device memory owned by the executor
    DType dtype_;
    GradBucketQueue queue_;
    std::vector<WorkPtr> work_;  // (buckets) posted and not yet waited
    bool in_backward_ = false, last_ = false;
    bool step_open_ = false;  // the step's last micro-batch began; finalize not yet called
    GpuGradSyncStats stats_;
};

}  // namespace

std::unique_ptr<GpuGradSync> make_nccl_grad_sync(Communicator& cpu_dp, DeviceStage& model, int device,
                                                 const GpuGradSyncOptions& options) {
    auto comm =
        CommNccl::from_mpi(cpu_dp, device, static_cast<cudaStream_t>(model.compute_stream()));
    if (options.zero_stage > 0) return make_nccl_zero_sync(std::move(comm), model, device, options);
    return std::make_unique<NcclGradSync>(std::move(comm), model, options);
}

}  // namespace loom

#endif  // LOOM_HAVE_NCCL
