// What a process knows about the MPI job it belongs to, and how a top-level
// error is reported once per job instead of once per rank.
//
// Errors that every rank hits alike (a bad job file, a malformed data file)
// would otherwise print N identical lines under mpirun. The rule:
//   - rank 0 always prints its error, then sends a fingerprint of it to every
//     other rank (announce_error);
//   - any other rank first waits a few seconds for rank 0's fingerprint
//     (same_error_on_rank0) and stays silent when it matches its own error;
//     when rank 0 sent nothing (it did not fail) or failed differently, the
//     rank prints its own error, naming itself.
// So a failure on some non-zero ranks only is still printed, by those ranks.
// The fingerprints travel on MPI_COMM_WORLD with a tag of their own (Loom's
// traffic uses duplicates of it), and only while MPI is initialised and not
// finalised: errors before MPI_Init are printed by every rank.
#pragma once

#include <string>

namespace loom {

// This process's rank in its job: MPI's when MPI is initialised, else what
// the launcher published (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK,
// SLURM_PROCID); -1 outside any launcher.
int job_rank();

// Ranks on this process's host, itself included (MPI's shared-memory split;
// collective over the world). 1 without MPI.
int mpi_ranks_on_host();

// Rank 0, after printing `message`: tells the other ranks (waits at most
// wait_s for the messages to leave). A no-op without a live MPI world.
void announce_error(const std::string& message, double wait_s = 5.0);

// Another rank: true when rank 0 announced the same message within wait_s
// (the rank should then stay silent). False without a live MPI world.
bool same_error_on_rank0(const std::string& message, double wait_s = 5.0);

}  // namespace loom
