// Process-wide set-up that every entry point (CLI, tests, benchmarks) runs once.
//
// NOTE: first touch of fresh pages costs ~14 us per 4 KiB on the target
// machines, so freed memory must stay mapped: runtime_init raises glibc's mmap
// and trim thresholds before any large allocation.
#pragma once

#include <string>

namespace loom {

struct RuntimeOptions {
    // 0: OMP_NUM_THREADS if set, else this process's share of the CPUs
    // (core/cpu_share.h: affinity, cgroup quota, ranks on the node).
    int threads = 0;
};

void runtime_init(const RuntimeOptions& opts = {});

// Pins the OpenMP threads to CPUs of their own where this process owns whole
// CPUs (core/cpu_bind.h), by the plan of the last runtime_init, which keeps
// them pinned when it changes the team later. Entry points that compute call
// it once set up; runtime_init does not, because pinning starts the OpenMP
// team, and a child forked after that (tests run code in forked children)
// hangs in its first parallel region waiting for threads it does not have.
void runtime_pin_threads();

// Hands the pages of freed heap memory back to the kernel once (glibc's
// malloc_trim; a no-op elsewhere). runtime_init's thresholds keep freed
// memory mapped for reuse, so what a one-off phase frees (reading and
// tokenizing the data) stays resident for the whole run where nothing of the
// same sizes comes back for it; call this when such a phase ends.
void runtime_release_freed_memory();

// libgomp reads its wait policy once, as it loads, before main runs: threads
// that finish a parallel region spin for GOMP_SPINCOUNT iterations (300000
// by default, about a millisecond) before they sleep. On a machine Loom does
// not have to itself those spins take the time slices the other threads of
// the region need, and a step of many short regions slows several fold. A
// main() that calls this first runs itself again with a short spin
// (k_spin_count) unless the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT;
// `argv` must be main's. Returns only when nothing was to be done or the
// exec failed (the run then goes on with libgomp's default).
void runtime_exec_with_wait_policy(char** argv);
inline constexpr const char* k_spin_count = "10000";  // docs/cpu-contention.md
int runtime_threads();
// Why runtime_init chose fewer threads than the affinity mask has CPUs, and
// whether it pinned them (core/cpu_bind.h); "" when there is nothing to say.
// For the run's log.
std::string runtime_thread_note();

}  // namespace loom
