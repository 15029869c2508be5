// CommNccl's internals shared by its two sources (comm_nccl.cpp: set-up,
// accessors, groups and split; comm_nccl_ops.cpp: posting the collectives):
// the NCCL helpers, the state a communicator and its splits share, and the
// Work of one NCCL operation. Not part of the API; include after comm_nccl.h.
#pragma once

#if defined(LOOM_HAVE_NCCL)

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>

#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/nccl_bootstrap.h"
#include "comm/cuda/comm_nccl.h"
#include "core/check.h"

namespace loom {

namespace nccl_detail {

inline bool nccl_failed(ncclResult_t r) {
    return r != ncclSuccess && r != ncclInProgress;
}

inline std::string nccl_reason(ncclResult_t r, ncclComm_t comm) {
    const char* last = ncclGetLastError(comm);
    if (last == nullptr || *last == '\0') return ncclGetErrorString(r);
    return fmt::format("{} ({})", ncclGetErrorString(r), last);
}

// Runs a scope on `device` and restores the caller's device: a process may
// drive several devices, and callers do not expect their current one to move.
// Quiet guards (destructors, abort paths) ignore CUDA errors.
class DeviceGuard {
  public:
    explicit DeviceGuard(int device, bool quiet = false) {
        if (quiet) {
            if (cudaGetDevice(&prev_) == cudaSuccess && prev_ != device)
                switched_ = cudaSetDevice(device) == cudaSuccess;
            return;
        }
        LOOM_CUDA_CHECK(cudaGetDevice(&prev_));
        if (prev_ != device) {
            LOOM_CUDA_CHECK(cudaSetDevice(device));
            switched_ = true;
        }
    }
    ~DeviceGuard() {
        if (switched_) (void)cudaSetDevice(prev_);
    }
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

  private:
    int prev_ = -1;
    bool switched_ = false;
};

inline ncclDataType_t nccl_type(DType t) {
    switch (t) {
        case DType::f32:
            return ncclFloat32;
        case DType::f64:
            return ncclFloat64;
        case DType::bf16:
            return ncclBfloat16;
        case DType::f16:
            return ncclFloat16;
        case DType::i32:
            return ncclInt32;
        case DType::i64:
            return ncclInt64;
        default:
            LOOM_FAIL("no NCCL datatype for {}", dtype_name(t));
    }
}

inline ncclRedOp_t nccl_op(ReduceOp op) {
    switch (op) {
        case ReduceOp::sum:
            return ncclSum;
        case ReduceOp::avg:
            return ncclAvg;
        case ReduceOp::max:
            return ncclMax;
    }
    LOOM_FAIL("no NCCL reduction for op {}", int(op));
}

inline bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
    const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
    return a_bytes && b_bytes && pa < pb + b_bytes && pb < pa + a_bytes;
}

inline void check_device_index(int device, const std::string& group) {
    const int n = cuda_device_count();
    LOOM_CHECK(device >= 0 && device < n,
               "CommNccl for group '{}': CUDA device {} requested but {} visible ({})", group,
               device, n, n == 0 ? cuda_unavailable_reason() : "check CUDA_VISIBLE_DEVICES");
}

// An event recorded on another device's stream fails at the first operation,
// and that failure aborts the communicator: catch the mistake up front.
inline void check_stream_device(cudaStream_t s, int device, const std::string& group) {
#if CUDART_VERSION >= 12080
    // The default streams follow the current device, which the communicator sets.
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return;
    int d = -1;
    LOOM_CUDA_CHECK(cudaStreamGetDevice(s, &d));
    LOOM_CHECK(d == device,
               "CommNccl for group '{}': the compute stream belongs to CUDA device {}, the "
               "communicator to device {}",
               group, d, device);
#else
    (void)s, (void)device, (void)group;
#endif
}

}  // namespace nccl_detail

using nccl_detail::DeviceGuard;
using nccl_detail::nccl_failed;
using nccl_detail::nccl_reason;

// --- shared state ----------------------------------------------------------

struct NcclShared {
    NcclShared(std::unique_ptr<NcclComm> owned, int dev)
        : device(dev), boot(std::move(owned)), comm(boot->get()) {}
    NcclShared(ncclComm_t from_split, int dev) : device(dev), split(from_split), comm(from_split) {}
    ~NcclShared() {
        DeviceGuard guard(device, /*quiet=*/true);
        // Teardown errors are ignored: a destructor must not throw.
        if (split != nullptr && comm != nullptr) (void)ncclCommDestroy(split);
        boot.reset();
        for (cudaEvent_t e : free_events) (void)cudaEventDestroy(e);
    }
    NcclShared(const NcclShared&) = delete;
    NcclShared& operator=(const NcclShared&) = delete;

    bool aborted() const { return comm == nullptr; }
    // Idempotent; the first reason is kept for later reports.
    void abort(const std::string& why) noexcept {
        if (comm == nullptr) return;
        DeviceGuard guard(device, /*quiet=*/true);
        if (boot)
            boot->abort();
        else
            (void)ncclCommAbort(split);
        comm = nullptr;
        try {
            reason = why;
        } catch (...) {
        }
    }
    // Completion events are recycled: one per operation adds up in a step.
    cudaEvent_t take_event() {
        if (!free_events.empty()) {
            cudaEvent_t e = free_events.back();
            free_events.pop_back();
            return e;
        }
        DeviceGuard guard(device);
        cudaEvent_t e = nullptr;
        LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        return e;
    }
    void give_event(cudaEvent_t e) noexcept {
        if (e == nullptr) return;
        try {
            free_events.push_back(e);
        } catch (...) {
            (void)cudaEventDestroy(e);
        }
    }

    int device = 0;
    std::unique_ptr<NcclComm> boot;  // owner when made from a unique id
    ncclComm_t split = nullptr;      // owner when made by ncclCommSplit
    ncclComm_t comm = nullptr;       // the live handle; nullptr once aborted
    std::string reason;              // why it was aborted
    std::vector<cudaEvent_t> free_events;
};

struct NcclOp {
    explicit NcclOp(std::shared_ptr<NcclShared> s)
        : shared(std::move(s)), done(shared->take_event()) {}
    ~NcclOp() { shared->give_event(done); }
    NcclOp(const NcclOp&) = delete;
    NcclOp& operator=(const NcclOp&) = delete;

    std::shared_ptr<NcclShared> shared;
    cudaEvent_t done = nullptr;
    // False until the NCCL call is on the stream (group_end, inside a group).
    bool recorded = false;
    // Why the operation can no longer complete (its group failed to start).
    std::string error;
};

struct CommStreams {
    cudaStream_t comm = nullptr;
    cudaEvent_t ready = nullptr;      // recorded on compute, waited on by comm
    cudaEvent_t drain = nullptr;      // recorded on comm, waited on by compute
    int32_t* barrier_word = nullptr;  // (1) on the device, always 0: barrier = max over it

    // The communicator's device must be current.
    CommStreams() {
        try {
            // Highest priority: NCCL kernels then get SMs ahead of queued
            // compute kernels, which is what lets reductions overlap backward.
            int least = 0, greatest = 0;
            LOOM_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
            LOOM_CUDA_CHECK(cudaStreamCreateWithPriority(&comm, cudaStreamNonBlocking, greatest));
            LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
            LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&drain, cudaEventDisableTiming));
            void* p = nullptr;
            // Stream-ordered, so neither this nor the free synchronises the device.
            LOOM_CUDA_CHECK(cudaMallocAsync(&p, sizeof(int32_t), comm));
            barrier_word = static_cast<int32_t*>(p);
            LOOM_CUDA_CHECK(cudaMemsetAsync(p, 0, sizeof(int32_t), comm));
        } catch (...) {
            release();
            throw;
        }
    }
    ~CommStreams() { release(); }
    CommStreams(const CommStreams&) = delete;
    CommStreams& operator=(const CommStreams&) = delete;

    // CUDA defers each release until the work queued before it has finished.
    void release() noexcept {
        if (barrier_word != nullptr) (void)cudaFreeAsync(barrier_word, comm);
        if (drain != nullptr) (void)cudaEventDestroy(drain);
        if (ready != nullptr) (void)cudaEventDestroy(ready);
        if (comm != nullptr) (void)cudaStreamDestroy(comm);
        barrier_word = nullptr;
        drain = ready = nullptr;
        comm = nullptr;
    }
};

// --- Work --------------------------------------------------------------------

namespace nccl_detail {

class NcclWork final : public Work {
  public:
    NcclWork(WorkInfo info, std::shared_ptr<NcclOp> op)
        : Work(std::move(info)), op_(std::move(op)) {}
    ~NcclWork() override {
        if (done_ || abandoned_ || !op_->recorded || !op_->error.empty() || !error_.empty()) return;
        try {
            wait();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "loom: unfinished %s dropped: %s\n", info_.what.c_str(), e.what());
        }
    }

    bool test() override {
        if (done_) return true;
        if (!error_.empty()) throw Error(error_);
        if (!op_->error.empty()) fail(op_->error);
        if (abandoned_ || !op_->recorded) return false;
        NcclShared& shared = *op_->shared;
        // An abort ends queued kernels early and their events then complete:
        // after one, completion no longer means a result.
        if (shared.aborted())
            fail(
                fmt::format("the communicator was aborted before it finished ({})", shared.reason));
        const cudaError_t q = cudaEventQuery(op_->done);
        if (q == cudaSuccess) {
            done_ = true;
            return true;
        }
        if (q != cudaErrorNotReady) {
            (void)cudaGetLastError();
            fail(fmt::format("CUDA error {}: {}", cudaGetErrorName(q), cudaGetErrorString(q)));
        }
        ncclResult_t async = ncclSuccess;
        const ncclResult_t r = ncclCommGetAsyncError(shared.comm, &async);
        if (r != ncclSuccess) async = r;
        if (nccl_failed(async)) fail(nccl_reason(async, shared.comm));
        return false;
    }

    bool recorded() const { return op_->recorded; }
    cudaEvent_t event() const { return op_->done; }

  protected:
    bool wait_until(Clock::time_point deadline) override {
        if (!done_ && !op_->recorded && op_->error.empty() && error_.empty())
            throw Error(fmt::format(
                "{} on group '{}': waited on inside group_start()/group_end(); NCCL starts "
                "grouped operations only at group_end()",
                info_.what, info_.group));
        // NCCL progresses without the host, so polling only costs latency:
        // yield for spin_s (short collectives return fast), then nap with a
        // growing interval so a stalled wait leaves the core to NCCL's proxy.
        const auto start = Clock::now();
        const auto spin = std::chrono::duration<double>(info_.options.spin_s);
        auto nap = std::chrono::microseconds(20);
        while (!test()) {
            const auto now = Clock::now();
            if (now > deadline) return false;
            if (now - start < spin) {
                std::this_thread::yield();
            } else {
                std::this_thread::sleep_for(nap);
                nap = std::min(nap * 2, std::chrono::microseconds(1000));
            }
        }
        return true;
    }

    // A timed-out collective would otherwise keep the peers' kernels (and
    // ours) spinning and could still write the caller's buffer: abort.
    void abandon() override {
        abandoned_ = true;
        op_->shared->abort(fmt::format("rank {} timed out in {} on group '{}'", info_.world_rank,
                                       info_.what, info_.group));
    }

  private:
    [[noreturn]] void fail(const std::string& reason) {
        error_ = fmt::format(
            "rank {} ({} rank {}): NCCL {} on group '{}' (world ranks {}) failed: {}; communicator "
            "aborted",
            info_.world_rank, info_.group, info_.rank, info_.what, info_.group, info_.group_ranks,
            reason);
        op_->shared->abort(error_);
        throw Error(error_);
    }

    std::shared_ptr<NcclOp> op_;
    std::string error_;
    bool done_ = false;
    bool abandoned_ = false;
};

}  // namespace nccl_detail

}  // namespace loom

#endif  // LOOM_HAVE_NCCL
