// cpu_share (cpu_share.h): the affinity mask, the cgroup quota and the node's
// rank count, and the thread count they give.
#include "core/cpu_share.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

namespace loom {
namespace {

std::string read_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) return {};
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

// Cores a quota file pair allows, 0 for none.
double v2_quota(const std::string& dir) {
    std::istringstream in(read_file(dir + "/cpu.max"));
    std::string quota;
    double period = 0;
    if (!(in >> quota >> period) || quota == "max" || period <= 0) return 0;
    const double q = std::atof(quota.c_str());
    return q > 0 ? q / period : 0;
}
double v1_quota(const std::string& dir) {
    const double q = std::atof(read_file(dir + "/cpu.cfs_quota_us").c_str());
    const double p = std::atof(read_file(dir + "/cpu.cfs_period_us").c_str());
    return q > 0 && p > 0 ? q / p : 0;
}

// The tightest quota on `path` and its ancestors under `base`.
template <class Quota>
double tightest(const std::string& base, std::string path, Quota quota) {
    double best = 0;
    while (true) {
        const double q = quota(base + path);
        if (q > 0 && (best == 0 || q < best)) best = q;
        if (path.empty() || path == "/") break;
        const size_t cut = path.find_last_of('/');
        path = cut == std::string::npos || cut == 0 ? std::string("/") : path.substr(0, cut);
    }
    return best;
}

int env_int(const char* name) {
    const char* v = std::getenv(name);
    return v && *v ? std::atoi(v) : 0;
}

}  // namespace

double cgroup_cpu_quota(const std::string& proc_cgroup, const std::string& root) {
    double best = 0;
    auto take = [&](double q) {
        if (q > 0 && (best == 0 || q < best)) best = q;
    };
    std::istringstream lines(proc_cgroup);
    std::string line;
    while (std::getline(lines, line)) {
        // "hierarchy-id:controllers:path"; v2 is "0::path".
        const size_t a = line.find(':'), b = line.find(':', a + 1);
        if (a == std::string::npos || b == std::string::npos) continue;
        const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        if (controllers.empty()) {
            take(tightest(root, path, v2_quota));
            continue;
        }
        std::vector<std::string> names;
        std::istringstream c(controllers);
        for (std::string n; std::getline(c, n, ',');) names.push_back(n);
        if (std::find(names.begin(), names.end(), "cpu") == names.end()) continue;
        // v1 mounts the cpu controller as cpu, or cpu,cpuacct with cpu a link.
        for (const std::string& mount : {controllers, std::string("cpu")})
            take(tightest(root + "/" + mount, path, v1_quota));
    }
    return best;
}

CpuShare cpu_share_of(int affinity, double quota, int local_ranks) {
    CpuShare s;
    s.affinity = std::max(1, affinity);
    s.quota = quota > 0 ? quota : 0;
    s.local_ranks = std::max(1, local_ranks);
    int cores = s.affinity;
    if (s.quota > 0) cores = std::min(cores, std::max(1, int(std::ceil(s.quota - 1e-9))));
    s.threads = std::max(1, cores / s.local_ranks);
    if (s.threads != s.affinity) {
        s.why = fmt::format("{} thread(s): {} CPU(s) in the affinity mask", s.threads, s.affinity);
        if (s.quota > 0 && cores < s.affinity)
            s.why += fmt::format(", a cgroup CPU quota of {:.2g} core(s)", s.quota);
        if (s.local_ranks > 1) s.why += fmt::format(", {} ranks on this node", s.local_ranks);
    }
    return s;
}

const std::vector<int>& process_cpus() {
    static const std::vector<int> cpus = [] {
        std::vector<int> c;
        cpu_set_t set;
        CPU_ZERO(&set);
        if (sched_getaffinity(0, sizeof(set), &set) == 0)
            for (int i = 0; i < CPU_SETSIZE; ++i)
                if (CPU_ISSET(i, &set)) c.push_back(i);
        return c;
    }();
    return cpus;
}

int node_local_ranks() {
    int ranks = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (ranks <= 0) ranks = env_int("MPI_LOCALNRANKS");
    if (ranks <= 0) ranks = env_int("SLURM_NTASKS_PER_NODE");
    return std::max(1, ranks);
}

int node_local_rank() {
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
        if (const char* v = std::getenv(name); v && *v) return std::atoi(v);
    return -1;
}

CpuShare cpu_share() {
    int affinity = int(process_cpus().size());
    if (affinity <= 0) affinity = int(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
    const double quota = cgroup_cpu_quota(read_file("/proc/self/cgroup"), "/sys/fs/cgroup");
    return cpu_share_of(affinity, quota, node_local_ranks());
}

}  // namespace loom
