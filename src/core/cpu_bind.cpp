#include "core/cpu_bind.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

#include "core/cpu_share.h"

namespace loom {
namespace {

// The mask the process started with (core/cpu_share.h), as a set.
const cpu_set_t& original_mask() {
    static const cpu_set_t mask = [] {
        cpu_set_t m;
        CPU_ZERO(&m);
        for (int c : process_cpus()) CPU_SET(c, &m);
        return m;
    }();
    return mask;
}

std::atomic<bool> g_pinned{false};

// A child of a pinned thread (mpirun under `loom launch`, a SageMaker
// worker's sshd) starts on every CPU the process had, not on thread 0's one.
void unpin_child() {
    const cpu_set_t& m = original_mask();
    if (CPU_COUNT(&m) > 0) sched_setaffinity(0, sizeof(m), &m);
}

bool user_set_affinity() {
    for (const char* name : {"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY"})
        if (const char* v = std::getenv(name); v && *v) return true;
    return false;
}

std::string cpu_list(const std::vector<int>& cpus) {
    std::string s;
    for (size_t i = 0; i < cpus.size(); ++i) s += fmt::format("{}{}", i ? "," : "", cpus[i]);
    return s;
}

}  // namespace

CpuBindPlan cpu_bind_plan(const std::vector<int>& mask, int threads, int local_ranks,
                          int local_rank, bool user_affinity) {
    CpuBindPlan p;
    const int ranks = std::max(1, local_ranks);
    if (threads < 2) return p;
    if (user_affinity) {
        p.why = "threads not pinned: OpenMP's affinity variables are set";
        return p;
    }
    if (int64_t(threads) * ranks != int64_t(mask.size())) {
        p.why = fmt::format("threads not pinned: {} thread(s) x {} rank(s) on this node do not "
                            "fill the {} CPU(s) of the affinity mask",
                            threads, ranks, mask.size());
        return p;
    }
    if (ranks > 1 && (local_rank < 0 || local_rank >= ranks)) {
        p.why = fmt::format("threads not pinned: {} ranks on this node and no local rank", ranks);
        return p;
    }
    const size_t first = size_t(ranks > 1 ? local_rank : 0) * size_t(threads);
    p.cpus.assign(mask.begin() + long(first), mask.begin() + long(first) + threads);
    p.why = fmt::format("{} threads pinned to CPUs {}", threads, cpu_list(p.cpus));
    return p;
}

CpuBindPlan cpu_bind_plan_here(int threads) {
    return cpu_bind_plan(process_cpus(), threads, node_local_ranks(), node_local_rank(),
                         user_set_affinity());
}

void cpu_bind_team(const CpuBindPlan& plan) {
    (void)original_mask();  // read before anything is pinned
    if (plan.cpus.empty()) {
        if (g_pinned.exchange(false)) {
#pragma omp parallel
            cpu_unbind_this_thread();
        }
        return;
    }
    static std::once_flag at_fork;
    std::call_once(at_fork, [] { pthread_atfork(nullptr, nullptr, unpin_child); });
    const int n = int(plan.cpus.size());
#pragma omp parallel num_threads(n)
    {
        const int t = omp_get_thread_num();
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(plan.cpus[size_t(t)], &one);
        pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
    }
    g_pinned = true;
}

void cpu_unbind_this_thread() {
    const cpu_set_t& m = original_mask();
    if (CPU_COUNT(&m) > 0) pthread_setaffinity_np(pthread_self(), sizeof(m), &m);
}

}  // namespace loom
