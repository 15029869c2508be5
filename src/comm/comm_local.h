// CommLocal: N ranks as N threads of one process, with the Communicator
// semantics of comm.h, so multi-rank tests run under plain ctest on a 2-core
// machine without mpirun.
//
// How it works: each group keeps a table of collective "rounds" keyed by call
// sequence number; a rank posts its buffers into round k and the last rank to
// arrive performs the whole collective (reductions in rank order 0, 1, 2, ...)
// and wakes the others. Point-to-point messages match per (src, dst, tag) in
// FIFO order and copy when both sides are posted, so a send completes only
// when its receive exists (stricter than MPI's eager sends; code that works
// here does not rely on buffering).
//
// Same timeouts as CommMpi. Extra checks MPI cannot afford: ranks that call
// different collectives (or different counts) at the same point fail with a
// message naming both calls. When one rank's thread throws, comm_local_run
// marks the world failed and every rank waiting in a collective fails at once
// instead of waiting out its timeout.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "comm/comm.h"

namespace loom {

// One world communicator per rank, sharing one in-process rendezvous; hand
// comms[r] to thread r.
std::vector<std::unique_ptr<Communicator>> comm_local_create(int n_ranks,
                                                             const CommOptions& options = {});

// Marks the world of `comm` failed: every rank blocked in (or later calling)
// wait() on it throws loom::Error carrying `reason`.
void comm_local_fail(Communicator& comm, const std::string& reason);

// Runs fn(world communicator of rank r) on n_ranks threads and joins them. If
// any rank throws, the world is failed (peers stop waiting) and the first
// error is rethrown as loom::Error("rank R: ...").
void comm_local_run(int n_ranks, const std::function<void(Communicator&)>& fn,
                    const CommOptions& options = {});

}  // namespace loom
