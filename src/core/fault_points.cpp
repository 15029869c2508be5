// LOOM_FAULT parsing and the actions (fault_points.h).
#include "core/fault_points.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace loom {

namespace {

struct Fault {
    bool armed = false;
    std::string point;
    long hit = 1;
    std::string action;
};

// The rank as the launchers export it, before (or without) MPI.
long env_rank() {
    for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
        if (const char* s = std::getenv(v)) return std::atol(s);
    return 0;
}

// Parsed once; the counter lives beside it (an atomic cannot be returned).
Fault parse_fault() {
    Fault p;
    const char* spec = std::getenv("LOOM_FAULT");
    if (!spec || !*spec) return p;
    if (const char* r = std::getenv("LOOM_FAULT_RANK"); r && *r && std::atol(r) != env_rank())
        return p;
    const std::string s = spec;
    const size_t a = s.find(':'), b = a == std::string::npos ? a : s.find(':', a + 1);
    if (b == std::string::npos) {
        std::fprintf(stderr, "loom: LOOM_FAULT=%s: expected <point>:<hit>:<action>\n", spec);
        std::exit(2);
    }
    p.point = s.substr(0, a);
    p.hit = std::atol(s.substr(a + 1, b - a - 1).c_str());
    p.action = s.substr(b + 1);
    p.armed = true;
    return p;
}

void act(const std::string& action) {
    std::fprintf(stderr, "loom: fault injection: %s\n", action.c_str());
    std::fflush(stderr);
    if (action == "term")
        kill(getpid(), SIGTERM);
    else if (action == "int")
        kill(getpid(), SIGINT);
    else if (action == "usr1")
        kill(getpid(), SIGUSR1);
    else if (action == "kill")
        kill(getpid(), SIGKILL);
    else if (action.rfind("stall", 0) == 0)
        std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(action.c_str() + 5)));
}

}  // namespace

void fault_point(const char* name) {
    static const Fault f = parse_fault();
    static std::atomic<long> seen{0};
    if (!f.armed || f.point != name) return;
    if (seen.fetch_add(1) + 1 == f.hit) act(f.action);
}

}  // namespace loom
