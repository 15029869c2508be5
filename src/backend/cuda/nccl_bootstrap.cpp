// NCCL communicator set-up and hang-free waiting (see nccl_bootstrap.h).
#include "backend/cuda/nccl_bootstrap.h"

#if defined(LOOM_HAVE_NCCL)

#include <algorithm>
#include <chrono>
#include <thread>

#include "backend/cuda/cuda_check.h"
#include "core/check.h"

namespace loom {

ncclUniqueId nccl_make_unique_id() {
    ncclUniqueId id;
    LOOM_NCCL_CHECK(ncclGetUniqueId(&id));
    return id;
}

NcclComm::NcclComm(const ncclUniqueId& id, int n_ranks, int rank, int device)
    : rank_(rank), n_ranks_(n_ranks) {
    LOOM_CHECK(n_ranks > 0 && rank >= 0 && rank < n_ranks,
               "NCCL: rank {} is outside a communicator of {} ranks", rank, n_ranks);
    LOOM_CUDA_CHECK(cudaSetDevice(device));
    LOOM_NCCL_CHECK(ncclCommInitRank(&comm_, n_ranks, id, rank));
}

NcclComm::~NcclComm() {
    // Teardown errors are ignored: a destructor must not throw.
    if (comm_) (void)ncclCommDestroy(comm_);
}

void NcclComm::abort() {
    if (comm_) (void)ncclCommAbort(comm_);
    comm_ = nullptr;
}

void nccl_wait(NcclComm& comm, cudaStream_t stream, const std::string& what, double timeout_ms) {
    LOOM_CHECK(comm.get() != nullptr, "rank {}: NCCL {} on an aborted communicator", comm.rank(),
               what);
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    auto sleep = std::chrono::microseconds(5);
    for (;;) {
        const cudaError_t q = cudaStreamQuery(stream);
        if (q == cudaSuccess) return;
        if (q != cudaErrorNotReady) {
            comm.abort();
            LOOM_CUDA_CHECK(q);
        }
        ncclResult_t async = ncclSuccess;
        LOOM_NCCL_CHECK(ncclCommGetAsyncError(comm.get(), &async));
        if (async != ncclSuccess && async != ncclInProgress) {
            comm.abort();
            LOOM_FAIL("rank {}: NCCL {} failed: {}", comm.rank(), what, ncclGetErrorString(async));
        }
        const double waited =
            std::chrono::duration<double, std::milli>(clock::now() - start).count();
        if (timeout_ms > 0 && waited > timeout_ms) {
            comm.abort();
            LOOM_FAIL(
                "rank {}: NCCL {} timed out after {:.0f} ms (a peer rank is dead or lagging); "
                "communicator aborted",
                comm.rank(), what, waited);
        }
        std::this_thread::sleep_for(sleep);
        sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
    }
}

}  // namespace loom

#endif  // LOOM_HAVE_NCCL
