#include "core/runtime.h"

#include <malloc.h>
#include <omp.h>
#include <unistd.h>

#include <cstdlib>

#include "core/cpu_bind.h"
#include "core/cpu_share.h"

namespace loom {
namespace {
std::string g_thread_note;
CpuBindPlan g_bind;
bool g_pin_asked = false;
}  // namespace

void runtime_release_freed_memory() {
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
}

void runtime_init(const RuntimeOptions& opts) {
    static bool done = false;
    if (!done) {
        mallopt(M_MMAP_THRESHOLD, 1 << 30);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
        mallopt(M_TOP_PAD, 64 << 20);
        done = true;
    }
    g_thread_note.clear();
    if (opts.threads > 0) {
        omp_set_num_threads(opts.threads);
    } else if (!std::getenv("OMP_NUM_THREADS")) {
        // OpenMP's default is the affinity mask; a quota or other ranks on
        // the node would leave threads waiting for CPUs at every barrier.
        const CpuShare share = cpu_share();
        if (share.threads != omp_get_max_threads()) omp_set_num_threads(share.threads);
        g_thread_note = share.why;
    }
    g_bind = cpu_bind_plan_here(omp_get_max_threads());
    if (!g_bind.why.empty()) g_thread_note += (g_thread_note.empty() ? "" : "; ") + g_bind.why;
    if (g_pin_asked) cpu_bind_team(g_bind);  // the team changed under pinned threads
}

void runtime_pin_threads() {
    g_pin_asked = true;
    cpu_bind_team(g_bind);
}

std::string runtime_thread_note() { return g_thread_note; }

void runtime_exec_with_wait_policy(char** argv) {
    if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
    // Set once: a child of this process (mpirun's ranks) inherits the choice.
    if (setenv("GOMP_SPINCOUNT", k_spin_count, 1) != 0) return;
    execv("/proc/self/exe", argv);
}

int runtime_threads() { return omp_get_max_threads(); }

}  // namespace loom
