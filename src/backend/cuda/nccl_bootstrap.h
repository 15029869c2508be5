// NCCL communicator set-up and hang-free waiting, for the NCCL communicator
// (src/parallel) to build on.
//
// Bootstrap is the caller's: rank 0 makes the unique id here and the launcher's
// MPI broadcasts its bytes (llm.c's MPI path); nothing here talks to MPI, TCP or
// a file system. Waiting never blocks forever: nccl_wait polls the stream and
// NCCL's asynchronous error state, and on error or timeout aborts the
// communicator and throws a message naming the rank and the operation.
#pragma once

#if defined(LOOM_HAVE_NCCL)

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

namespace loom {

// Rank 0 calls this and broadcasts the bytes (sizeof(ncclUniqueId)) to every rank.
ncclUniqueId nccl_make_unique_id();

class NcclComm {
  public:
    // Selects `device` and joins the communicator of `n_ranks` (collective call).
    NcclComm(const ncclUniqueId& id, int n_ranks, int rank, int device);
    ~NcclComm();
    NcclComm(const NcclComm&) = delete;
    NcclComm& operator=(const NcclComm&) = delete;

    ncclComm_t get() const { return comm_; }
    int rank() const { return rank_; }
    int n_ranks() const { return n_ranks_; }
    // Aborts the communicator (pending collectives return); further use throws.
    void abort();

  private:
    ncclComm_t comm_ = nullptr;
    int rank_ = 0, n_ranks_ = 0;
};

// Waits until the work queued on `stream` (e.g. a collective) has finished,
// polling NCCL's async error state. Throws (after aborting `comm`) on an NCCL
// error or when `timeout_ms` passes: "rank 3: NCCL all_reduce(grads) timed
// out after 600000 ms". timeout_ms <= 0 waits without limit (still polling errors).
void nccl_wait(NcclComm& comm, cudaStream_t stream, const std::string& what, double timeout_ms);

}  // namespace loom

#endif  // LOOM_HAVE_NCCL
