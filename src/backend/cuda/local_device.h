// Which GPU a rank drives: its node-local rank modulo the visible devices.
//
// Launchers say where a process sits on its node through the environment
// (mpirun, srun, torchrun-style tools), so the choice needs no communication
// and is made before any communicator exists. Per-rank CUDA_VISIBLE_DEVICES
// (Slurm's --gpus-per-task) leaves one visible device and every rank picks 0,
// which is what that layout means.
//
// NOTE: NCCL refuses two ranks of one communicator on the same GPU, so more
// local ranks than GPUs fails at communicator creation, not here.
#pragma once

namespace loom {

// The node-local rank the launcher published: OMPI_COMM_WORLD_LOCAL_RANK (Open
// MPI), MPI_LOCALRANKID (MPICH), SLURM_LOCALID (srun), LOCAL_RANK; the first
// one set wins. -1 when none is set (a process started by hand).
int launcher_local_rank();

// local_rank modulo n_devices; a negative (unknown) local rank maps to 0.
// Throws loom::Error when n_devices < 1.
int local_device_for_rank(int local_rank, int n_devices);

// local_device_for_rank(launcher_local_rank(), visible CUDA devices). Throws
// loom::Error, with CUDA's reason, when no GPU is usable.
int local_device();

}  // namespace loom
