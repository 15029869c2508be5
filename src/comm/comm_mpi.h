// CommMpi: the Communicator over Open MPI, for CPU buffers.
//
// Every operation is an MPI nonblocking call (MPI_Iallreduce, MPI_Isend, ...);
// Work::wait() polls MPI_Test with a short back-off so that it can give up
// after CommOptions::timeout_s, print which rank waited how long in which
// collective on which group, and MPI_Abort the job (or throw, if asked).
// Groups come from split(), a thin wrapper over MPI_Comm_split preceded by a
// timed barrier, so a missing rank is reported instead of hanging there too.
//
// Determinism: with fixed_order_reduction=false an all-reduce's sum is Open
// MPI's, whose grouping of terms depends on the algorithm it picks (message
// size, rank count): results match the sequential sum to rounding, not
// bitwise. With fixed_order_reduction=true every element is summed in rank
// order, bitwise equal to CommLocal. reduce_scatter always sums in rank order
// (an all-to-all, then a local sum: faster than Open MPI's own here). See
// docs/parallelism.md.
//
// Limits: element counts per call must fit in an int (MPI's count type).
// Only the thread that created the communicators may call it
// (MPI_THREAD_SERIALIZED is requested; one thread drives communication).
#pragma once

#include <memory>

#include "comm/comm.h"

namespace loom {

// Owns MPI initialisation for a process: MPI_Init_thread in the constructor
// (unless MPI is already initialised), MPI_Finalize in the destructor. If the
// destructor runs while an exception unwinds, it skips MPI_Finalize (which
// would wait for peers) and the process exits non-zero; mpirun then reports
// the rank and stops the job. Communicators must not outlive the session.
class MpiSession {
public:
    MpiSession();
    ~MpiSession();
    MpiSession(const MpiSession&) = delete;
    MpiSession& operator=(const MpiSession&) = delete;

    int world_rank() const { return world_rank_; }
    int world_size() const { return world_size_; }
    // False when Loom was built without MPI (the constructor throws then).
    static bool available();

private:
    bool owns_ = false;
    int world_rank_ = 0;
    int world_size_ = 1;
};

// The world communicator (MPI_COMM_WORLD duplicated, so Loom's traffic never
// mixes with anyone else's). Needs a live MpiSession.
std::unique_ptr<Communicator> comm_mpi_world(const CommOptions& options = {});

}  // namespace loom
