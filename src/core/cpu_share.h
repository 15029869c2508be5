// How many threads this process should run: the CPUs it may use (its
// affinity mask), capped by a CPU bandwidth quota (a container's cgroup
// cpu.max, or cpu.cfs_quota_us under cgroup v1), shared by the ranks an MPI
// launcher put on this node. OpenMP's default counts the affinity mask only,
// so a container limited to 2 of 16 CPUs would run 16 threads and lose most
// of its time slices at every barrier.
//
// Not here: the user's choice (--threads, OMP_NUM_THREADS), which
// runtime_init (core/runtime.h) puts first.
#pragma once

#include <string>
#include <vector>

namespace loom {

struct CpuShare {
    int affinity = 1;      // CPUs in the affinity mask
    double quota = 0;      // cores the cgroup quota allows; 0: no quota
    int local_ranks = 1;   // ranks on this node (the launcher's variables)
    int threads = 1;       // what this process should run
    std::string why;       // empty when threads == affinity (nothing limits it)
};

// The quota in cores from a cgroup tree: `proc_cgroup` is the text of
// /proc/self/cgroup, `root` where the hierarchy is mounted. The tightest
// quota on the process's cgroup or any ancestor counts (v2 cpu.max
// "quota period", "max" meaning none; v1 cpu.cfs_quota_us / period, -1
// meaning none). 0 when there is none or nothing can be read.
double cgroup_cpu_quota(const std::string& proc_cgroup, const std::string& root);

// From the running process: affinity, /proc/self/cgroup under /sys/fs/cgroup
// and node_local_ranks().
CpuShare cpu_share();
// The CPUs of the affinity mask as the process started, read once: after
// core/cpu_bind.h pinned thread 0, its own mask is a single CPU.
const std::vector<int>& process_cpus();
// Ranks a launcher put on this node (OMPI_COMM_WORLD_LOCAL_SIZE,
// MPI_LOCALNRANKS, SLURM_NTASKS_PER_NODE; 1 without one), and this rank's
// place among them (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID,
// SLURM_LOCALID; -1 without one).
int node_local_ranks();
int node_local_rank();
// The rule alone: threads = max(1, min(affinity, ceil(quota)) / local_ranks).
CpuShare cpu_share_of(int affinity, double quota, int local_ranks);

}  // namespace loom
