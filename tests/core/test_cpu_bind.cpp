// cpu_bind: the pinning rule, and pinning itself in a forked child (the
// child's OpenMP team is its own, so the test process is left as it was):
// each thread on its CPU, a thread Loom starts and a forked child back on
// every CPU.
#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "core/cpu_bind.h"

namespace loom::test {
namespace {

TEST(CpuBindPlan, OneCpuPerThreadWhenTheThreadsFillTheMask) {
    const CpuBindPlan p = cpu_bind_plan({0, 1, 4, 5}, 4, 1, -1, false);
    EXPECT_EQ(p.cpus, (std::vector<int>{0, 1, 4, 5}));
    EXPECT_EQ(p.why, "4 threads pinned to CPUs 0,1,4,5");
}

TEST(CpuBindPlan, EachRankOnTheNodeTakesItsOwnBlock) {
    const std::vector<int> mask = {0, 1, 2, 3, 4, 5, 6, 7};
    EXPECT_EQ(cpu_bind_plan(mask, 4, 2, 0, false).cpus, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(cpu_bind_plan(mask, 4, 2, 1, false).cpus, (std::vector<int>{4, 5, 6, 7}));
    const CpuBindPlan unknown = cpu_bind_plan(mask, 4, 2, -1, false);
    EXPECT_TRUE(unknown.cpus.empty());
    EXPECT_EQ(unknown.why, "threads not pinned: 2 ranks on this node and no local rank");
}

TEST(CpuBindPlan, NoPinningWhereOthersDecideOrCpusWouldStayIdle) {
    const std::vector<int> mask = {0, 1, 2, 3};
    EXPECT_TRUE(cpu_bind_plan(mask, 1, 1, -1, false).cpus.empty()) << "one thread";
    EXPECT_TRUE(cpu_bind_plan(mask, 1, 1, -1, false).why.empty());
    const CpuBindPlan user = cpu_bind_plan(mask, 4, 1, -1, true);
    EXPECT_TRUE(user.cpus.empty());
    EXPECT_EQ(user.why, "threads not pinned: OpenMP's affinity variables are set");
    const CpuBindPlan fewer = cpu_bind_plan(mask, 2, 1, -1, false);
    EXPECT_TRUE(fewer.cpus.empty()) << "two such jobs would share CPUs 0-1 and leave 2-3 idle";
    EXPECT_EQ(fewer.why,
              "threads not pinned: 2 thread(s) x 1 rank(s) on this node do not fill the 4 "
              "CPU(s) of the affinity mask");
    EXPECT_TRUE(cpu_bind_plan(mask, 8, 1, -1, false).cpus.empty()) << "more threads than CPUs";
}

int cpus_of_this_thread() {
    cpu_set_t s;
    CPU_ZERO(&s);
    if (pthread_getaffinity_np(pthread_self(), sizeof(s), &s) != 0) return -1;
    return CPU_COUNT(&s);
}

// In a child: pin a team over the whole mask and check every thread, then
// what a new thread and a grandchild get. Exit codes name the failure.
int pin_in_child() {
    std::vector<int> mask;
    cpu_set_t all;
    CPU_ZERO(&all);
    sched_getaffinity(0, sizeof(all), &all);
    for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &all)) mask.push_back(c);
    const int n = int(mask.size());
    const CpuBindPlan plan = cpu_bind_plan(mask, n, 1, -1, false);
    if (int(plan.cpus.size()) != n) return 2;
    omp_set_num_threads(n);
    cpu_bind_team(plan);
    std::vector<int> on(size_t(n), -1), count(size_t(n), -1);
#pragma omp parallel num_threads(n)
    {
        const int t = omp_get_thread_num();
        cpu_set_t s;
        CPU_ZERO(&s);
        pthread_getaffinity_np(pthread_self(), sizeof(s), &s);
        count[size_t(t)] = CPU_COUNT(&s);
        on[size_t(t)] = CPU_ISSET(plan.cpus[size_t(t)], &s) ? plan.cpus[size_t(t)] : -1;
    }
    for (int t = 0; t < n; ++t)
        if (count[size_t(t)] != 1 || on[size_t(t)] != plan.cpus[size_t(t)]) return 3;
    int helper = 0;
    std::thread([&] {
        cpu_unbind_this_thread();
        helper = cpus_of_this_thread();
    }).join();
    if (helper != n) return 4;
    const pid_t pid = fork();
    if (pid == 0) _exit(cpus_of_this_thread() == n ? 0 : 1);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 5;
    cpu_bind_team(CpuBindPlan{});  // unpinning: every thread back on the whole mask
    int back = 0;
#pragma omp parallel num_threads(n) reduction(+ : back)
    back += cpus_of_this_thread() == n ? 1 : 0;
    return back == n ? 0 : 6;
}

TEST(CpuBind, EachThreadOnItsCpuAndWhatItStartsOnAll) {
    if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one CPU: nothing to pin";
    cpu_set_t all;
    CPU_ZERO(&all);
    sched_getaffinity(0, sizeof(all), &all);
    if (CPU_COUNT(&all) < 2) GTEST_SKIP() << "an affinity mask of one CPU";
    const pid_t pid = fork();
    if (pid == 0) _exit(pin_in_child());
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0)
        << "2: no plan; 3: a thread not on its one CPU; 4: a started thread not back on all; 5: "
           "a forked child not on all; 6: unpinning left a thread pinned";
}

}  // namespace
}  // namespace loom::test
