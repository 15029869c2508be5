// Stop signals (core/stop_signals.h). oneDNN 2.x's JIT sgemm kernels point
// rsp into the heap, so a signal handler that runs on a GEMM thread writes
// its frame over heap memory (oneDNN issue 4845): `loom train` at 2 ranks
// aborted with "corrupted size vs. prev_size" after a SIGTERM in about half
// the trials. The fix is that no handler runs on any thread that computes:
// the signals are blocked everywhere (threads made later inherit the mask,
// OpenMP's included) and taken by the watcher with sigwait(). These cases
// check that mechanism directly, and that GEMMs under a stream of signals
// keep their results while the stop is recorded. (The corruption itself
// needs the real kernels at the moment a handler lands; tests/cli's
// chaos_sigterm.sh reproduces it end to end.)
//
// Each case runs in a forked child: the mask and the watcher are per process.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/runtime.h"
#include "core/stop_signals.h"
#include "ops/gemm.h"

namespace loom {
namespace {

// GEMMs on the calling thread until `stop`; returns false on any result that
// differs from the first one. The calling thread must be the process's main
// thread: the kernel hands a process-directed signal to the main thread when
// it is running, so that is where a handler would interrupt the GEMM kernels
// (as in `loom train`, whose main thread runs them). Fresh buffers every
// round keep malloc busy, so a corrupted heap fails malloc's own checks.
bool gemm_rounds(const std::atomic<bool>& stop) {
    // A linear's backward at BERT-like sizes (matmul_backward's four calls):
    // rows N, features C -> OC.
    const int64_t N = 200, C = 256, OC = 1024;
    std::vector<float> x(size_t(N * C)), w(size_t(OC * C)), dy(size_t(N * OC));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 13) - 6) / 8.0f;
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 7) - 3) / 4.0f;
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = float(int(i % 5) - 2) / 2.0f;
    auto round = [&](std::vector<float>& dx, std::vector<float>& dw) {
        dx.assign(size_t(N * C), 0.0f);
        dw.assign(size_t(OC * C), 0.0f);
        gemm<float>(false, false, N, C, OC, 1.0f, dy.data(), OC, w.data(), C, 0.0f, dx.data(), C);
        gemm<float>(true, false, OC, C, N, 1.0f, dy.data(), OC, x.data(), C, 1.0f, dw.data(), C);
        gemm<float>(false, true, N, C, OC, 1.0f, dy.data(), OC, w.data(), OC, 1.0f, dx.data(), C);
        gemm<float>(true, false, C, OC, N, 1.0f, x.data(), C, dy.data(), OC, 1.0f, dw.data(), OC);
    };
    std::vector<float> dx0, dw0;
    round(dx0, dw0);
    bool ok = true;
    while (!stop.load()) {
        std::vector<float> dx, dw;
        round(dx, dw);
        ok = ok && dx == dx0 && dw == dw0;
    }
    return ok;
}

// Runs `body` in a child process; returns its wait status.
template <typename F>
int in_child(F body) {
    const pid_t pid = fork();
    if (pid == 0) {
        body();
        std::fflush(stdout);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

// The stop signals' bits in a /proc status mask line ("SigBlk:\t<hex>").
unsigned stop_bits(const std::string& status_path, const char* field) {
    std::FILE* f = std::fopen(status_path.c_str(), "r");
    if (!f) return 0;
    char line[256];
    unsigned long long mask = 0;
    const size_t n = std::strlen(field);
    while (std::fgets(line, sizeof line, f))
        if (std::strncmp(line, field, n) == 0) mask = std::strtoull(line + n, nullptr, 16);
    std::fclose(f);
    auto bit = [&](int sig) { return unsigned((mask >> (sig - 1)) & 1u); };
    return bit(SIGTERM) | bit(SIGINT) << 1 | bit(SIGUSR1) << 2;
}

TEST(StopSignals, NoThreadButTheWatcherCanTakeThemAndNoHandlerIsInstalled) {
    const int status = in_child([] {
        stop_signals_install();
        stop_signals_accept(true);
        // Threads made afterwards, OpenMP's team among them.
        std::vector<float> a(256 * 256, 1.0f), c(256 * 256);
        gemm<float>(false, false, 256, 256, 256, 1.0f, a.data(), 256, a.data(), 256, 0.0f, c.data(),
                    256);
        std::thread worker([] { std::this_thread::sleep_for(std::chrono::milliseconds(200)); });
        int unblocked = 0;
        DIR* d = opendir("/proc/self/task");
        while (dirent* e = readdir(d)) {
            if (e->d_name[0] == '.') continue;
            const std::string path = std::string("/proc/self/task/") + e->d_name + "/status";
            if (stop_bits(path, "SigBlk:") != 7) ++unblocked;
        }
        closedir(d);
        worker.join();
        if (unblocked != 1) _exit(10 + unblocked);  // the watcher alone (it sigwaits)
        if (stop_bits("/proc/self/status", "SigCgt:") != 0) _exit(6);  // a handler is installed
    });
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0)
        << "10 + n: n threads could take a stop signal (must be 1, the watcher); 6: a handler";
}

TEST(StopSignals, ThousandsOfSignalsDuringGemmsLeaveResultsIntact) {
    const int status = in_child([] {
        runtime_init({1});  // loom's malloc settings; one thread, as each rank has
        stop_signals_install();
        stop_signals_accept(true);
        std::atomic<bool> stop{false};
        // Signals from another thread of this process, as kill(2) from
        // outside would send them: process-directed, any thread may get them.
        std::thread sender([&] {
            const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
            // SIGTERM first and alone: sigwait takes the lowest pending
            // signal, and the first one taken is the one the run stops on.
            kill(getpid(), SIGTERM);
            while (stop_requested() == 0) std::this_thread::yield();
            const int sigs[] = {SIGTERM, SIGUSR1, SIGTERM};
            for (int i = 0; std::chrono::steady_clock::now() < until; ++i) {
                kill(getpid(), sigs[i % 3]);
                std::this_thread::sleep_for(std::chrono::microseconds(200));
            }
            stop = true;
        });
        const bool ok = gemm_rounds(stop);
        sender.join();
        if (!ok) _exit(3);
        if (stop_requested() != SIGTERM) _exit(4);  // the first signal wins
    });
    ASSERT_TRUE(WIFEXITED(status))
        << "child killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    EXPECT_EQ(WEXITSTATUS(status), 0) << "3: a GEMM result changed; 4: wrong stop signal";
}

TEST(StopSignals, RepeatedTermIsNotedAndTheProcessLivesOn) {
    const int status = in_child([] {
        stop_signals_install();
        stop_signals_accept(true);
        for (int i = 0; i < 3; ++i) kill(getpid(), SIGTERM);
        for (int i = 0; i < 200 && stop_requested() == 0; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (stop_requested() != SIGTERM) _exit(4);
    });
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(StopSignals, SecondSigintEndsTheProcessAtOnce) {
    const int status = in_child([] {
        stop_signals_install();
        stop_signals_accept(true);
        kill(getpid(), SIGINT);
        for (int i = 0; i < 200 && stop_requested() == 0; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        kill(getpid(), SIGINT);
        std::this_thread::sleep_for(std::chrono::seconds(5));
        _exit(5);  // still alive: the second Ctrl-C did nothing
    });
    ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
    EXPECT_EQ(WTERMSIG(status), SIGINT);
}

TEST(StopSignals, OutsideAStopAwarePhaseASignalEndsTheProcessAsUsual) {
    const int status = in_child([] {
        stop_signals_install();
        kill(getpid(), SIGTERM);
        std::this_thread::sleep_for(std::chrono::seconds(5));
        _exit(5);
    });
    ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
    EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

}  // namespace
}  // namespace loom
