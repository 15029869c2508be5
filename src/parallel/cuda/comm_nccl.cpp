// CommNccl: NCCL implementation of comm.h (see comm_nccl.h for the policy).
//
// An operation is one NCCL call on the comm stream between two events: the
// shared `ready` event (compute -> comm) before it and the operation's own
// completion event after it. Works poll the completion event. The NCCL handle
// is shared by the communicator and its Works and aborted on the first error
// or timeout, which also ends every other operation still queued on it.
#include "parallel/cuda/comm_nccl.h"

#if defined(LOOM_HAVE_NCCL)

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <thread>

#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/nccl_bootstrap.h"
#include "core/check.h"

namespace loom {

namespace {

bool nccl_failed(ncclResult_t r) {
    return r != ncclSuccess && r != ncclInProgress;
}

std::string nccl_reason(ncclResult_t r, ncclComm_t comm) {
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

ncclDataType_t nccl_type(DType t) {
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

ncclRedOp_t nccl_op(ReduceOp op) {
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

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
    const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
    return a_bytes && b_bytes && pa < pb + b_bytes && pb < pa + a_bytes;
}

void check_device_index(int device, const std::string& group) {
    const int n = cuda_device_count();
    LOOM_CHECK(device >= 0 && device < n,
               "CommNccl for group '{}': CUDA device {} requested but {} visible ({})", group,
               device, n, n == 0 ? cuda_unavailable_reason() : "check CUDA_VISIBLE_DEVICES");
}

// An event recorded on another device's stream fails at the first operation,
// and that failure aborts the communicator: catch the mistake up front.
void check_stream_device(cudaStream_t s, int device, const std::string& group) {
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

}  // namespace

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

namespace {

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

}  // namespace

// --- construction ------------------------------------------------------------

CommNccl::CommNccl(const ncclUniqueId& id, int rank, std::vector<int> world_ranks, std::string name,
                   int device, cudaStream_t compute_stream, const CommOptions& options)
    : Communicator(rank, std::move(world_ranks), std::move(name), options),
      device_(device),
      compute_stream_(compute_stream) {
    check_device_index(device_, this->name());
    check_stream_device(compute_stream_, device_, this->name());
    DeviceGuard guard(device_);
    shared_ = std::make_shared<NcclShared>(
        std::make_unique<NcclComm>(id, size(), this->rank(), device_), device_);
    init_streams();
}

CommNccl::CommNccl(SplitTag, std::shared_ptr<NcclShared> shared, int rank,
                   std::vector<int> world_ranks, std::string name, int device,
                   cudaStream_t compute_stream, const CommOptions& options)
    : Communicator(rank, std::move(world_ranks), std::move(name), options),
      shared_(std::move(shared)),
      device_(device),
      compute_stream_(compute_stream) {
    DeviceGuard guard(device_);
    init_streams();
}

void CommNccl::init_streams() {
    // NOTE: checked after the NCCL communicator exists: a rank that failed
    // before joining would leave its peers blocked in ncclCommInitRank, which
    // has no timeout, while a failure here surfaces at their first wait.
    LOOM_CHECK(!options().fixed_order_reduction,
               "CommNccl for group '{}': fixed_order_reduction is not available over NCCL, which "
               "picks the summation order (deterministic for a fixed NCCL_ALGO/NCCL_PROTO and rank "
               "count, but not rank order); clear it for device groups",
               name());
    streams_ = std::make_unique<CommStreams>();
}

std::unique_ptr<CommNccl> CommNccl::from_mpi(Communicator& cpu_group, int device,
                                             cudaStream_t compute_stream,
                                             const CommOptions& options) {
    // CPU communicators move f32/f64/i32/i64 only: the id travels as i32 words.
    static_assert(sizeof(ncclUniqueId) % sizeof(int32_t) == 0,
                  "ncclUniqueId must be a whole number of 32-bit words");
    std::vector<int32_t> words(sizeof(ncclUniqueId) / sizeof(int32_t), 0);
    // Everything that can fail locally happens before the exchange, and the
    // outcome is agreed on: a rank that could not join must not leave the
    // others blocked in ncclCommInitRank, which has no timeout.
    std::string local_error;
    try {
        check_device_index(device, cpu_group.name());
        check_stream_device(compute_stream, device, cpu_group.name());
        DeviceGuard guard(device);
        LOOM_CUDA_CHECK(cudaFree(nullptr));  // creates the device's context now
        if (cpu_group.rank() == 0) {
            const ncclUniqueId id = nccl_make_unique_id();
            std::memcpy(words.data(), &id, sizeof(id));
        }
    } catch (const std::exception& e) {
        local_error = e.what();
    }
    int32_t failed = local_error.empty() ? 0 : 1;
    cpu_group.all_reduce(&failed, 1, DType::i32, ReduceOp::max)->wait();
    if (failed != 0) {
        LOOM_FAIL("rank {}: CommNccl set-up for group '{}' (world ranks {}) failed {}: {}",
                  cpu_group.world_rank(), cpu_group.name(),
                  comm_format_ranks(cpu_group.world_ranks()),
                  local_error.empty() ? "on another rank" : "here",
                  local_error.empty() ? "see that rank's message" : local_error);
    }
    cpu_group.broadcast(words.data(), int64_t(words.size()), DType::i32, 0)->wait();
    ncclUniqueId id;
    std::memcpy(&id, words.data(), sizeof(id));
    return std::make_unique<CommNccl>(id, cpu_group.rank(), cpu_group.world_ranks(),
                                      cpu_group.name(), device, compute_stream, options);
}

std::unique_ptr<CommNccl> CommNccl::from_mpi(Communicator& cpu_group, int device,
                                             cudaStream_t compute_stream) {
    CommOptions options = cpu_group.options();
    options.fixed_order_reduction = false;
    return from_mpi(cpu_group, device, compute_stream, options);
}

CommNccl::~CommNccl() {
    DeviceGuard guard(device_, /*quiet=*/true);
    if (in_group_) {
        // An exception left a group open. NCCL's group state is per thread:
        // close it, or this thread's later NCCL calls would join it.
        try {
            on_group_end();
        } catch (...) {
        }
    }
    drain_for_destruction();
    streams_.reset();
    shared_.reset();
}

// The stream, the events and the barrier word must outlive the operations
// queued on them; a peer that never arrives must not turn this into a hang.
void CommNccl::drain_for_destruction() noexcept {
    if (!streams_ || !shared_ || shared_->aborted()) return;
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    auto nap = std::chrono::microseconds(20);
    std::string why;
    for (;;) {
        const cudaError_t q = cudaStreamQuery(streams_->comm);
        if (q == cudaSuccess) return;
        if (q != cudaErrorNotReady) {
            why = cudaGetErrorString(q);
            break;
        }
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(shared_->comm, &async) != ncclSuccess || nccl_failed(async)) {
            why = ncclGetErrorString(async);
            break;
        }
        const double waited = std::chrono::duration<double>(clock::now() - start).count();
        if (waited > options().timeout_s) {
            why = "operations still queued after the timeout";
            break;
        }
        std::this_thread::sleep_for(nap);
        nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
    std::fprintf(stderr, "loom: warning: NCCL communicator '%s' (rank %d) destroyed: %s; aborted\n",
                 name().c_str(), rank(), why.c_str());
    shared_->abort(why);
}

// --- accessors -----------------------------------------------------------------

cudaStream_t CommNccl::comm_stream() const {
    return streams_->comm;
}
bool CommNccl::aborted() const {
    return shared_->aborted();
}
ncclComm_t CommNccl::nccl_comm() const {
    return shared_->comm;
}

void CommNccl::abort() {
    shared_->abort(fmt::format("abort() called on {}", describe()));
}

bool CommNccl::accepts_dtype(DType d) const {
    return d == DType::f32 || d == DType::f64 || d == DType::i32 || d == DType::i64 ||
           d == DType::bf16 || d == DType::f16;
}

void CommNccl::make_compute_wait() {
    make_compute_wait(compute_stream_);
}

void CommNccl::make_compute_wait(cudaStream_t stream) {
    LOOM_CHECK(!in_group_,
               "make_compute_wait on group '{}' inside group_start()/group_end(): the grouped "
               "operations are not on the stream yet",
               name());
    DeviceGuard guard(device_);
    LOOM_CUDA_CHECK(cudaEventRecord(streams_->drain, streams_->comm));
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(stream, streams_->drain, 0));
}

void CommNccl::make_stream_wait(const Work& work, cudaStream_t stream) {
    const auto* w = dynamic_cast<const NcclWork*>(&work);
    if (w == nullptr) {
        make_compute_wait(stream);
        return;
    }
    LOOM_CHECK(w->recorded(),
               "make_stream_wait on group '{}': {} was issued inside a group that is still open",
               name(), work.info().what);
    DeviceGuard guard(device_);
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(stream, w->event(), 0));
}

// --- posting -------------------------------------------------------------------

template <typename F>
WorkPtr CommNccl::enqueue(WorkInfo info, F&& call) {
    LOOM_CHECK(!shared_->aborted(),
               "{} on group '{}': the NCCL communicator was aborted ({}); it cannot be used again",
               info.what, info.group, shared_->reason);
    DeviceGuard guard(device_);
    auto op = std::make_shared<NcclOp>(shared_);
    std::vector<void*> staged;
    try {
        LOOM_CUDA_CHECK(cudaEventRecord(streams_->ready, compute_stream_));
        LOOM_CUDA_CHECK(cudaStreamWaitEvent(streams_->comm, streams_->ready, 0));
        const ncclResult_t r = call(shared_->comm, streams_->comm, staged);
        if (nccl_failed(r)) LOOM_FAIL("{}", nccl_reason(r, shared_->comm));
        if (!in_group_) {
            LOOM_CUDA_CHECK(cudaEventRecord(op->done, streams_->comm));
            op->recorded = true;
        }
    } catch (const std::exception& e) {
        // This rank did not join the operation, so its peers are out of step:
        // end the communicator rather than let them wait out the timeout.
        const std::string msg = fmt::format(
            "rank {} ({} rank {}): NCCL {} on group '{}' (world ranks {}) could not be issued: {}; "
            "communicator aborted",
            info.world_rank, info.group, info.rank, info.what, info.group, info.group_ranks,
            e.what());
        if (in_group_) {
            // Aborting now would free the communicator under NCCL's open
            // group; on_group_end closes the group first, then aborts.
            group_staged_.insert(group_staged_.end(), staged.begin(), staged.end());
            if (group_error_.empty()) group_error_ = msg;
        } else {
            release(staged);
            shared_->abort(msg);
        }
        throw Error(msg);
    }
    if (in_group_) {
        group_ops_.push_back(op);
        group_staged_.insert(group_staged_.end(), staged.begin(), staged.end());
    } else {
        release(staged);
    }
    return std::make_shared<NcclWork>(std::move(info), std::move(op));
}

const void* CommNccl::stage(const void* src, size_t bytes, std::vector<void*>& staged) {
    void* p = nullptr;
    LOOM_CUDA_CHECK(cudaMallocAsync(&p, bytes, streams_->comm));
    staged.push_back(p);
    LOOM_CUDA_CHECK(cudaMemcpyAsync(p, src, bytes, cudaMemcpyDeviceToDevice, streams_->comm));
    return p;
}

// Stream-ordered: each free takes effect after everything already queued on
// the comm stream, i.e. after the NCCL call that reads the copy.
void CommNccl::release(std::vector<void*>& staged) {
    for (void* p : staged) (void)cudaFreeAsync(p, streams_->comm);
    staged.clear();
}

void CommNccl::check_device_buffer(const void* p, const WorkInfo& info, const char* which) const {
    cudaPointerAttributes a{};
    const cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        LOOM_FAIL("{} on group '{}': cannot inspect the {}buffer: {}", info.what, info.group, which,
                  cudaGetErrorString(e));
    }
    LOOM_CHECK(a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged,
               "{} on group '{}': the {}buffer is host memory; CommNccl moves device buffers "
               "(CPU tensors go through CommMpi)",
               info.what, info.group, which);
    LOOM_CHECK(a.type == cudaMemoryTypeManaged || a.device == device_,
               "{} on group '{}': the {}buffer is on CUDA device {}, this communicator drives "
               "device {}",
               info.what, info.group, which, a.device, device_);
}

WorkPtr CommNccl::post_all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op,
                                  WorkInfo info) {
    if (count == 0) return work_done(std::move(info));
    check_device_buffer(buf, info, "");
    return enqueue(std::move(info), [&](ncclComm_t c, cudaStream_t s, std::vector<void*>&) {
        return ncclAllReduce(buf, buf, size_t(count), nccl_type(dtype), nccl_op(op), c, s);
    });
}

WorkPtr CommNccl::post_reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                                      ReduceOp op, WorkInfo info) {
    if (recv_count == 0) return work_done(std::move(info));
    check_device_buffer(send, info, "send ");
    check_device_buffer(recv, info, "receive ");
    const size_t chunk = size_t(recv_count) * dtype_size(dtype);
    const size_t total = chunk * size_t(size());
    // NCCL's in-place form has recv at this rank's chunk of send; any other
    // overlap would be overwritten before it is read, so send is copied first.
    const bool in_place = recv == static_cast<const std::byte*>(send) + size_t(rank()) * chunk;
    const bool staging = !in_place && overlaps(send, total, recv, chunk);
    return enqueue(std::move(info), [&](ncclComm_t c, cudaStream_t s, std::vector<void*>& staged) {
        const void* src = staging ? stage(send, total, staged) : send;
        return ncclReduceScatter(src, recv, size_t(recv_count), nccl_type(dtype), nccl_op(op), c,
                                 s);
    });
}

WorkPtr CommNccl::post_all_gather(const void* send, void* recv, int64_t send_count, DType dtype,
                                  WorkInfo info) {
    if (send_count == 0) return work_done(std::move(info));
    check_device_buffer(send, info, "send ");
    check_device_buffer(recv, info, "receive ");
    const size_t chunk = size_t(send_count) * dtype_size(dtype);
    const size_t total = chunk * size_t(size());
    // In place when send is this rank's slot of recv (NCCL's form); see above.
    const bool in_place = send == static_cast<const std::byte*>(recv) + size_t(rank()) * chunk;
    const bool staging = !in_place && overlaps(send, chunk, recv, total);
    return enqueue(std::move(info), [&](ncclComm_t c, cudaStream_t s, std::vector<void*>& staged) {
        const void* src = staging ? stage(send, chunk, staged) : send;
        return ncclAllGather(src, recv, size_t(send_count), nccl_type(dtype), c, s);
    });
}

WorkPtr CommNccl::post_broadcast(void* buf, int64_t count, DType dtype, int root, WorkInfo info) {
    if (count == 0) return work_done(std::move(info));
    check_device_buffer(buf, info, "");
    return enqueue(std::move(info), [&](ncclComm_t c, cudaStream_t s, std::vector<void*>&) {
        return ncclBroadcast(buf, buf, size_t(count), nccl_type(dtype), root, c, s);
    });
}

// NOTE: `tag` is not sent: NCCL matches messages between two ranks in the
// order they were posted (see comm_nccl.h).
WorkPtr CommNccl::post_send(const void* buf, int64_t count, DType dtype, int peer, int /*tag*/,
                            WorkInfo info) {
    LOOM_CHECK(peer != rank() || in_group_,
               "{} on group '{}': a send to self must sit between group_start() and group_end() "
               "with its receive (NCCL queues both on one stream)",
               info.what, info.group);
    if (count == 0) return work_done(std::move(info));
    check_device_buffer(buf, info, "");
    return enqueue(std::move(info), [&](ncclComm_t c, cudaStream_t s, std::vector<void*>&) {
        return ncclSend(buf, size_t(count), nccl_type(dtype), peer, c, s);
    });
}

WorkPtr CommNccl::post_recv(void* buf, int64_t count, DType dtype, int peer, int /*tag*/,
                            WorkInfo info) {
    LOOM_CHECK(peer != rank() || in_group_,
               "{} on group '{}': a receive from self must sit between group_start() and "
               "group_end() with its send (NCCL queues both on one stream)",
               info.what, info.group);
    if (count == 0) return work_done(std::move(info));
    check_device_buffer(buf, info, "");
    return enqueue(std::move(info), [&](ncclComm_t c, cudaStream_t s, std::vector<void*>&) {
        return ncclRecv(buf, size_t(count), nccl_type(dtype), peer, c, s);
    });
}

// A reduction completes on a rank only once every rank has contributed, so
// its completion is the barrier. It is ordered after compute like any other
// operation.
WorkPtr CommNccl::post_barrier(WorkInfo info) {
    int32_t* word = streams_->barrier_word;
    return enqueue(std::move(info), [&](ncclComm_t c, cudaStream_t s, std::vector<void*>&) {
        return ncclAllReduce(word, word, 1, ncclInt32, ncclMax, c, s);
    });
}

// --- groups --------------------------------------------------------------------

void CommNccl::on_group_start() {
    LOOM_NCCL_CHECK(ncclGroupStart());
    in_group_ = true;
}

// Never throws: the base class forms the group's Work after this returns, and
// a failure reaches the caller through that Work (each part throws).
void CommNccl::on_group_end() {
    in_group_ = false;
    std::string error = group_error_;
    {
        DeviceGuard guard(device_, /*quiet=*/true);
        const ncclResult_t r = ncclGroupEnd();
        if (nccl_failed(r) && error.empty())
            error = fmt::format("ncclGroupEnd: {}", nccl_reason(r, shared_->comm));
        for (auto& op : group_ops_) {
            if (error.empty()) {
                const cudaError_t e = cudaEventRecord(op->done, streams_->comm);
                if (e != cudaSuccess)
                    error = fmt::format("cudaEventRecord: {}", cudaGetErrorString(e));
            }
            if (error.empty())
                op->recorded = true;
            else
                op->error = error;
        }
        release(group_staged_);
    }
    group_ops_.clear();
    group_error_.clear();
    if (!error.empty()) shared_->abort(error);
}

// --- split ---------------------------------------------------------------------

std::vector<int64_t> CommNccl::gather_to_host(const std::vector<int64_t>& mine) {
    const size_t n = mine.size();
    const size_t bytes = n * sizeof(int64_t);
    std::vector<int64_t> all(n * size_t(size()));
    if (n == 0) return all;
    DeviceGuard guard(device_);
    void* d = nullptr;
    LOOM_CUDA_CHECK(cudaMallocAsync(&d, bytes * size_t(size()), streams_->comm));
    std::vector<void*> owned{d};
    try {
        void* slot = static_cast<std::byte*>(d) + size_t(rank()) * bytes;
        LOOM_CUDA_CHECK(
            cudaMemcpyAsync(slot, mine.data(), bytes, cudaMemcpyHostToDevice, streams_->comm));
        all_gather(slot, d, int64_t(n), DType::i64)->wait();
        LOOM_CUDA_CHECK(cudaMemcpyAsync(all.data(), d, all.size() * sizeof(int64_t),
                                        cudaMemcpyDeviceToHost, streams_->comm));
        // Local copies only: the gather has finished, so this cannot hang.
        LOOM_CUDA_CHECK(cudaStreamSynchronize(streams_->comm));
    } catch (...) {
        release(owned);
        throw;
    }
    release(owned);
    return all;
}

std::unique_ptr<Communicator> CommNccl::do_split(const std::vector<int>& ranks,
                                                 const std::string& name) {
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
    LOOM_FAIL(
        "split of group '{}' into '{}' needs NCCL 2.18 or newer (ncclCommSplit); Loom was "
        "built against NCCL {}.{}.{}",
        this->name(), name, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
#else
    // ncclCommSplit blocks without a timeout: a timed barrier first turns a
    // missing rank into a report instead of a hang.
    post_barrier(make_info(fmt::format("barrier before split('{}')", name)))->wait();
    const auto self = std::find(ranks.begin(), ranks.end(), rank());
    const bool member = self != ranks.end();
    const int color = member ? *std::min_element(ranks.begin(), ranks.end()) : NCCL_SPLIT_NOCOLOR;
    const int key = member ? int(self - ranks.begin()) : 0;
    ncclComm_t sub = nullptr;
    {
        DeviceGuard guard(device_);
        const ncclResult_t r = ncclCommSplit(shared_->comm, color, key, &sub, nullptr);
        if (nccl_failed(r)) {
            const std::string msg =
                fmt::format("rank {}: ncclCommSplit of group '{}' into '{}' failed: {}",
                            world_rank(), this->name(), name, nccl_reason(r, shared_->comm));
            shared_->abort(msg);
            throw Error(msg);
        }
    }
    if (!member) return nullptr;
    LOOM_ASSERT(sub != nullptr, "ncclCommSplit gave member {} of '{}' no communicator", rank(),
                name);
    std::vector<int> world;
    for (int r : ranks) world.push_back(world_ranks()[size_t(r)]);
    auto shared = std::make_shared<NcclShared>(sub, device_);
    int sub_size = 0, sub_rank = 0;
    LOOM_NCCL_CHECK(ncclCommCount(sub, &sub_size));
    LOOM_NCCL_CHECK(ncclCommUserRank(sub, &sub_rank));
    // The Communicator takes its size from the list; a wrong list shows up
    // below, checked collectively so that every member throws, not just one.
    std::vector<int> listed(size_t(sub_size), -1);
    for (int q = 0; q < sub_size; ++q)
        listed[size_t(q)] = q < int(world.size()) ? world[size_t(q)] : -1;
    auto comm = std::unique_ptr<CommNccl>(new CommNccl(SplitTag{}, std::move(shared), sub_rank,
                                                       std::move(listed), name, device_,
                                                       compute_stream_, options()));
    const std::vector<int64_t> sizes = comm->gather_to_host({int64_t(ranks.size())});
    for (int q = 0; q < sub_size; ++q)
        LOOM_CHECK(sizes[size_t(q)] == int64_t(ranks.size()) && sub_size == int(ranks.size()),
                   "split of group '{}' into '{}': rank {} lists {} but the group formed has {} "
                   "members (member {} lists {} ranks); members must pass identical lists",
                   this->name(), name, rank(), comm_format_ranks(ranks), sub_size, q,
                   sizes[size_t(q)]);
    const std::vector<int64_t> mine(ranks.begin(), ranks.end());
    const std::vector<int64_t> all = comm->gather_to_host(mine);
    for (int q = 0; q < sub_size; ++q)
        LOOM_CHECK(std::equal(mine.begin(), mine.end(), all.begin() + q * int64_t(mine.size())),
                   "split of group '{}' into '{}': member {} passed a different list than {}",
                   this->name(), name, q, comm_format_ranks(ranks));
    LOOM_ASSERT(sub_rank == key, "split '{}': NCCL rank {} != list position {}", name, sub_rank,
                key);
    return comm;
#endif
}

}  // namespace loom

#endif  // LOOM_HAVE_NCCL
