// The backends the device-neutral tests run on, by name:
// - "cpu": cpu_backend();
// - "staged": host memory and the CPU's kernels behind a backend that says
//   its memory is not host-addressable, so a ParamTable keeps a staging copy
//   and every host read or write must cross with upload/download, as on a
//   GPU. A path that forgot a transfer reads stale (or poisoned) staging and
//   fails the same expectations the CPU run meets. Its table adds the
//   reference fused attention (fused_attention_reference.h), so models on it
//   take the fused path a GPU takes, with the CPU's results.
// - "cuda" (builds with LOOM_TEST_CUDA): device 0 on its own stream; a test
//   on it skips where no GPU is visible (skip_if_absent).
// A suite takes the name as a parameter (ggml's test-backend-ops idea, over
// whole models) and builds its model with placement.device on that backend.
#pragma once

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/storage.h"
#include "fused_attention_reference.h"
#include "nn/param_table.h"
#include "ops/device_ops.h"

#ifdef LOOM_TEST_CUDA
#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda_context.h"
#include "ops/cuda/device_ops_cuda.h"
#endif

namespace loom::test {

class StagedBackend final : public Backend {
  public:
    StagedBackend() : Backend(cpu_ops_with_fused_attention()) {}
    // What the backend says it is; Device::cuda lays tables out as a GPU's
    // (its ops stay the CPU's: only for tests that run none).
    Device kind = Device::cpu;
    Device device() const override { return kind; }
    bool host_addressable() const override { return false; }
    std::string name() const override { return "staged"; }
    std::shared_ptr<Storage> alloc(size_t nbytes) override { return Storage::alloc(nbytes); }
    void to_device(void* dst, const void* host, size_t nbytes) override {
        uploaded += nbytes;
        if (nbytes) std::memcpy(dst, host, nbytes);
    }
    void to_host(void* host, const void* src, size_t nbytes) override {
        downloaded += nbytes;
        if (nbytes) std::memcpy(host, src, nbytes);
    }
    void copy(void* dst, const void* src, size_t nbytes) override {
        if (nbytes) std::memmove(dst, src, nbytes);
    }
    void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                 size_t rows) override {
        cpu_backend().copy_2d(dst, dst_pitch, src, src_pitch, row_bytes, rows);
    }
    void zero(void* p, size_t nbytes) override {
        if (nbytes) std::memset(p, 0, nbytes);
    }
    void synchronize() override { run_copies(base_ + copies_.size()); }

    // The copy queue (activation offloading). Compute runs at once, in
    // program order. Copies run either at once too (`eager`: as early as a
    // device could run them, which exposes a copy into memory compute still
    // needs) or as late as ordering allows (`deferred`: only when compute
    // waits on a marker set after them, or at synchronize, which exposes a
    // missing wait and a source overwritten before its copy-out ran).
    enum class CopyMode { eager, deferred };
    CopyMode copy_mode = CopyMode::eager;
    struct StagedMarker final : Marker {
        size_t copies = 0;  // copies enqueued before the marked point, ever
    };
    std::unique_ptr<Marker> new_marker() override { return std::make_unique<StagedMarker>(); }
    void mark(Marker& m, Queue q) override {
        if (q == Queue::copy) static_cast<StagedMarker&>(m).copies = base_ + copies_.size();
    }
    void wait_for(Queue q, const Marker& m) override {
        if (q == Queue::compute) run_copies(static_cast<const StagedMarker&>(m).copies);
    }
    void copy_out(void* host, const void* src, size_t nbytes) override {
        offloaded += nbytes;
        enqueue(host, src, nbytes);
    }
    void copy_back(void* dst, const void* host, size_t nbytes) override {
        reloaded += nbytes;
        enqueue(dst, host, nbytes);
    }

    size_t uploaded = 0, downloaded = 0, offloaded = 0, reloaded = 0;

  private:
    struct Copy {
        void* dst;
        const void* src;
        size_t n;
    };
    void enqueue(void* dst, const void* src, size_t n) {
        copies_.push_back({dst, src, n});
        if (copy_mode == CopyMode::eager) run_copies(base_ + copies_.size());
    }
    // Runs the copies enqueued before position `upto` (counted over all time).
    void run_copies(size_t upto) {
        for (; base_ + done_ < upto; ++done_)
            std::memcpy(copies_[done_].dst, copies_[done_].src, copies_[done_].n);
        if (done_ == copies_.size()) {
            base_ += done_;
            copies_.clear();
            done_ = 0;
        }
    }
    std::vector<Copy> copies_;  // not yet dropped; [0, done_) have run
    size_t base_ = 0, done_ = 0;
};

inline std::vector<std::string> test_backend_names() {
#ifdef LOOM_TEST_CUDA
    return {"cpu", "staged", "cuda"};
#else
    return {"cpu", "staged"};
#endif
}

// Why `name` cannot run here (a GPU backend without a GPU), or "": the
// caller skips with the reason.
inline std::string backend_absent_reason(const std::string& name) {
#ifdef LOOM_TEST_CUDA
    if (name == "cuda") return cuda_unavailable_reason();
#else
    (void)name;
#endif
    return "";
}

// One backend per name for the whole test binary.
inline Backend& test_backend(const std::string& name) {
    static StagedBackend staged;
    if (name == "staged") return staged;
#ifdef LOOM_TEST_CUDA
    if (name == "cuda") {
        static CudaContext ctx(0);
        static const std::unique_ptr<Backend> cuda = make_cuda_backend(ctx);
        return *cuda;
    }
#endif
    return cpu_backend();
}

// NaN over the host copies of a staged table, so a forward or an update
// that read them instead of the backend's buffers shows.
inline void poison_host_copies(const ParamTable& t) {
    if (!t.staged()) return;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::fill(t.params_data(), t.params_data() + t.flat_numel(), nan);
    std::fill(t.grads_data(), t.grads_data() + t.flat_numel(), nan);
}

}  // namespace loom::test
