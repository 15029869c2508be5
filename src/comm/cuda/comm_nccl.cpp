// CommNccl: NCCL implementation of comm.h (see comm_nccl.h for the policy).
//
// An operation is one NCCL call on the comm stream between two events: the
// shared `ready` event (compute -> comm) before it and the operation's own
// completion event after it. Works poll the completion event. The NCCL handle
// is shared by the communicator and its Works and aborted on the first error
// or timeout, which also ends every other operation still queued on it.
#include "comm/cuda/comm_nccl.h"

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
#include "comm/cuda/comm_nccl_internal.h"
#include "core/check.h"

namespace loom {

using namespace nccl_detail;

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

void CommNccl::set_compute_stream(cudaStream_t stream) {
    // Inside a group the operations already issued recorded the old stream's
    // event; switching there would order the rest differently.
    LOOM_CHECK(!in_group_, "set_compute_stream on group '{}' inside group_start()/group_end()",
               name());
    check_stream_device(stream, device_, name());
    compute_stream_ = stream;
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
