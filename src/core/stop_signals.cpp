// Stop requests through a sigwait() thread (see stop_signals.h for why).
#include "core/stop_signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/cpu_bind.h"

namespace loom {

namespace {

std::atomic<int> g_requested{0};
std::atomic<bool> g_accepting{false};

sigset_t stop_set() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    return set;
}

// Ends the process as the signal's default action would, from the watcher.
[[noreturn]] void die_by(int sig) {
    std::fflush(stdout);
    std::fflush(stderr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    const sigset_t set = stop_set();
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    // Delivered to this thread, where it is now unblocked with its default
    // action (SIGUSR1's too is to terminate).
    pthread_kill(pthread_self(), sig);
    _exit(128 + sig);  // not reached
}

void watch() {
    const sigset_t set = stop_set();
    bool announced = false;
    while (true) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0) continue;
        if (!g_accepting.load()) die_by(sig);
        int expected = 0;
        if (g_requested.compare_exchange_strong(expected, sig)) {
            std::fprintf(stderr,
                         "loom: %s received: finishing the current step, then writing a "
                         "checkpoint and stopping (SIGINT again stops at once)\n",
                         strsignal(sig));
            std::fflush(stderr);
            continue;
        }
        if (sig == SIGINT && expected == SIGINT) die_by(sig);
        if (!announced) {
            std::fprintf(stderr, "loom: %s received: already stopping\n", strsignal(sig));
            std::fflush(stderr);
            announced = true;
        }
    }
}

}  // namespace

void stop_signals_install() {
    static std::once_flag once;
    std::call_once(once, [] {
        const sigset_t set = stop_set();
        pthread_sigmask(SIG_BLOCK, &set, nullptr);
        std::thread([] {
            cpu_unbind_this_thread();
            watch();
        }).detach();
    });
}

void stop_signals_accept(bool on) {
    g_accepting.store(on);
}

int stop_requested() {
    return g_requested.load();
}

void stop_request(int sig) {
    g_requested.store(sig);
}

}  // namespace loom
