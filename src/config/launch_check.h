// The job's launcher keys against the running job.
//
// Ranks are started by the launcher (loom launch, mpirun -np N, srun), never
// by `loom train` itself; loom launch reads the job's distribution.mpi block
// to start them (cli/launch_plan.h). Inside a rank the block is checked
// against what the launcher did: processes_per_host must equal the
// ranks on this host (an error names the key, its line and both counts), and
// the log says how many replicas the data-parallel settings act on, so that
// zero_stage or bucket sizes on a single replica are not silently inert.
#pragma once

#include <string>
#include <vector>

#include "config/job.h"

namespace loom {

struct LaunchFacts {
    bool launched = false;  // started by an MPI launcher (mpirun, srun, an MPIJob)
    int world_size = 1;
    int ranks_on_host = 1;  // ranks sharing this process's host, itself included
};

// Notes for the start of the log; throws loom::Error when a launcher key
// contradicts the run.
std::vector<std::string> launch_notes(const Job& job, const LaunchFacts& facts);

}  // namespace loom
