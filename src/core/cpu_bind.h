// Pinning each OpenMP thread to a CPU of its own when this process owns a
// whole set of CPUs.
//
// Why: Linux balances runnable threads, not the work behind a barrier. With
// one other busy process on a 2-CPU machine the scheduler kept both of
// Loom's threads on one CPU and the busy process alone on the other 72% of
// the time (PELT sees two threads that sleep at barriers as one busy one),
// so Loom ran on one core where a fair share is 4/3. Pinned, the two threads
// never share a CPU, and the pieces a GEMM is shared in (ops/gemm_pieces.h)
// let the thread that has its core to itself take more of the work
// (docs/cpu-contention.md).
//
// Only when nobody else decided: not when the user set OpenMP's own affinity
// variables, nor when this process runs fewer threads than the CPUs it may
// use (two such jobs would pile onto the same CPUs and leave the rest idle),
// nor when several ranks share the node and this one does not know its
// place among them.
//
// A thread inherits its creator's CPUs, so every thread Loom starts that is
// not a compute thread (the data loader, readers, watchers) calls
// cpu_unbind_this_thread() first, going back to the process's mask as it
// was; a child process (fork) goes back to it by itself.
#pragma once

#include <string>
#include <vector>

namespace loom {

struct CpuBindPlan {
    std::vector<int> cpus;  // OpenMP thread i runs on cpus[i]; empty: no pinning
    std::string why;        // for the run's notes: what was pinned, or why not
};

// The rule alone. `mask`: the CPUs of the affinity mask, in order;
// `local_rank` < 0 when unknown; `user_affinity`: OMP_PROC_BIND,
// OMP_PLACES, GOMP_CPU_AFFINITY or KMP_AFFINITY is set.
CpuBindPlan cpu_bind_plan(const std::vector<int>& mask, int threads, int local_ranks,
                          int local_rank, bool user_affinity);

// The plan for this process: its mask as first seen, the launcher's local
// rank and size variables, OpenMP's affinity variables.
CpuBindPlan cpu_bind_plan_here(int threads);

// Pins the threads of an OpenMP team of cpus.size() threads, the calling one
// included (thread 0). Does nothing for an empty plan, except undo an
// earlier pinning of the calling thread.
void cpu_bind_team(const CpuBindPlan& plan);

// The calling thread back on every CPU of the process's original mask.
void cpu_unbind_this_thread();

}  // namespace loom
