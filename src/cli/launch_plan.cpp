// Rank count, hosts and ranks per node for `loom launch` (see launch_plan.h).
#include "cli/launch_plan.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>

#include "config/job.h"
#include "core/check.h"

namespace loom::cli {

namespace {

int parse_count(const std::string& text, const std::string& what) {
    char* end = nullptr;
    const long v = std::strtol(text.c_str(), &end, 10);
    LOOM_CHECK(!text.empty() && *end == '\0' && v >= 1 && v <= 1000000,
               "{}: expected a whole number of slots >= 1, got '{}'", what, text);
    return int(v);
}

std::string where(const Job& job, const std::string& key) {
    auto it = job.locations.find(key);
    return it != job.locations.end() ? it->second : job.source;
}

bool file_exists(const std::string& p) {
    struct stat st {};
    return !p.empty() && stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

int env_int(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::atoi(v) : 0;
}

std::string hosts_text(const std::vector<HostSlots>& hosts) {
    std::string s;
    for (const auto& h : hosts) {
        if (!s.empty()) s += ',';
        s += fmt::format("{}:{}", h.name, h.slots);
    }
    return s;
}

}  // namespace

std::vector<HostSlots> parse_hosts(const std::string& spec) {
    std::vector<HostSlots> hosts;
    std::stringstream in(spec);
    std::string entry;
    while (std::getline(in, entry, ',')) {
        LOOM_CHECK(!entry.empty(), "--hosts '{}': empty entry (expected host[:slots],...)", spec);
        HostSlots h;
        const auto colon = entry.rfind(':');
        h.name = entry.substr(0, colon);
        if (colon != std::string::npos)
            h.slots = parse_count(entry.substr(colon + 1), fmt::format("--hosts entry '{}'", entry));
        LOOM_CHECK(!h.name.empty(), "--hosts entry '{}': no host name", entry);
        hosts.push_back(h);
    }
    LOOM_CHECK(!hosts.empty(), "--hosts: expected host[:slots],..., got '{}'", spec);
    return hosts;
}

std::vector<HostSlots> read_hostfile(const std::string& path) {
    std::ifstream in(path);
    LOOM_CHECK(in.good(), "--hostfile {}: cannot read the file", path);
    std::vector<HostSlots> hosts;
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
        line = line.substr(0, line.find('#'));
        std::istringstream words(line);
        HostSlots h;
        if (!(words >> h.name)) continue;
        std::string w;
        while (words >> w) {
            const auto eq = w.find('=');
            const std::string key = w.substr(0, eq);
            const std::string what = fmt::format("{}:{}: '{}'", path, n, w);
            LOOM_CHECK(eq != std::string::npos &&
                           (key == "slots" || key == "max_slots" || key == "max-slots"),
                       "{}: expected 'host [slots=N] [max_slots=N]'", what);
            const int v = parse_count(w.substr(eq + 1), what);
            if (key == "slots") h.slots = v;
        }
        hosts.push_back(h);
    }
    LOOM_CHECK(!hosts.empty(), "--hostfile {}: no hosts in the file", path);
    return hosts;
}

std::vector<std::string> split_words(const std::string& s, const std::string& what) {
    std::vector<std::string> words;
    std::string cur;
    bool in_word = false;
    char quote = 0;
    for (char c : s) {
        if (quote) {
            if (c == quote) quote = 0;
            else cur += c;
        } else if (c == '\'' || c == '"') {
            quote = c;
            in_word = true;
        } else if (c == ' ' || c == '\t' || c == '\n') {
            if (in_word) words.push_back(cur);
            cur.clear();
            in_word = false;
        } else {
            cur += c;
            in_word = true;
        }
    }
    LOOM_CHECK(quote == 0, "{}: unterminated {} quote in '{}'", what, quote, s);
    if (in_word) words.push_back(cur);
    return words;
}

LaunchPlan plan_launch(const LaunchRequest& r) {
    LaunchPlan p;
    LOOM_CHECK(r.nproc >= 0, "launch: --nproc must be >= 1, got {}", r.nproc);
    LOOM_CHECK(r.nproc_per_node >= 0, "launch: --nproc-per-node must be >= 1, got {}",
               r.nproc_per_node);
    LOOM_CHECK(r.threads >= 0, "launch: --threads must be >= 1, got {}", r.threads);
    LOOM_CHECK(r.hosts.empty() || r.hostfile.empty(),
               "launch: give --hosts or --hostfile, not both");
    if (!r.hosts.empty()) p.hosts = parse_hosts(r.hosts);
    if (!r.hostfile.empty()) {
        p.hosts = read_hostfile(r.hostfile);
        p.hosts_from_file = true;
    }

    // The job's own word on the layout, when the file is there to read (the
    // ranks read it again; a job that does not parse fails here, once).
    int64_t job_ranks = 0, job_per_node = 0, tp = 1;
    std::string placement = "cluster", job_src;
    if (file_exists(r.job)) {
        JobParseOptions po;
        po.check_paths = false;
        const Job job = job_load(r.job, r.job_overrides, po);
        const DistributionArgs& d = job.distribution;
        tp = std::max<int64_t>(1, d.tensor_parallel_degree);
        placement = d.placement_strategy;
        job_src = job.source;
        if (d.data_parallel_degree > 0)
            job_ranks = d.data_parallel_degree * d.pipeline_parallel_degree * tp;
        job_per_node = d.processes_per_host;
        if (!d.custom_mpi_options.empty()) {
            p.custom_mpi_options = split_words(d.custom_mpi_options, "custom_mpi_options");
            p.notes.push_back(
                fmt::format("custom_mpi_options from {} passed to mpirun: {}", job.source,
                            d.custom_mpi_options));
        }
        if (job_ranks > 0 && r.nproc > 0 && job_ranks != r.nproc)
            LOOM_FAIL(
                "launch: --nproc {} but {}: distribution.data_parallel_degree {} x "
                "pipeline_parallel_degree {} x tensor_parallel_degree {} = {} ranks; drop --nproc "
                "or change the degrees",
                r.nproc, where(job, "distribution.data_parallel_degree"), d.data_parallel_degree,
                d.pipeline_parallel_degree, tp, job_ranks);
        if (job_per_node > 0 && r.nproc_per_node > 0 && job_per_node != r.nproc_per_node)
            LOOM_FAIL("launch: --nproc-per-node {} but {}: distribution.mpi.processes_per_host is "
                      "{}; drop one or make them agree",
                      r.nproc_per_node, where(job, "distribution.mpi.processes_per_host"),
                      job_per_node);
    }

    p.per_node = r.nproc_per_node > 0 ? r.nproc_per_node : int(job_per_node);
    if (p.per_node > 0 && r.nproc_per_node == 0)
        p.notes.push_back(fmt::format("{} ranks per node from {}: distribution.mpi.processes_per_host",
                                      p.per_node, job_src));
    if (!p.hosts.empty() && p.per_node > 0) {
        for (auto& h : p.hosts) h.slots = p.per_node;
        p.hosts_from_file = false;  // the slots changed: spelled out with --host
    }
    for (auto& h : p.hosts)
        if (h.slots == 0) h.slots = 1;  // as Open MPI counts a host named without slots
    p.in_allocation = p.hosts.empty() && std::getenv("SLURM_JOB_ID") != nullptr;
    const int slots = std::accumulate(p.hosts.begin(), p.hosts.end(), 0,
                                      [](int a, const HostSlots& h) { return a + h.slots; });
    const int nodes = !p.hosts.empty() ? int(p.hosts.size())
                      : p.in_allocation ? std::max(1, env_int("SLURM_JOB_NUM_NODES"))
                                        : 1;

    if (r.nproc > 0) {
        p.np = r.nproc;
    } else if (job_ranks > 0) {
        p.np = int(job_ranks);
        p.notes.push_back(fmt::format("{} ranks from {}: distribution degrees", p.np, job_src));
    } else if (p.per_node > 0) {
        p.np = p.per_node * nodes;
    } else if (!p.hosts.empty()) {
        p.np = slots;
    } else if (p.in_allocation && env_int("SLURM_NTASKS") > 0) {
        p.np = env_int("SLURM_NTASKS");
    } else {
        LOOM_FAIL("launch: how many ranks? Give --nproc N (or --nproc-per-node N, --hosts "
                  "h1:8,h2:8, --hostfile FILE), or set distribution.data_parallel_degree in "
                  "the job file{}",
                  r.job.empty() || file_exists(r.job) ? "" : fmt::format(" ({} was not found)", r.job));
    }
    if (p.hosts.empty() && !p.in_allocation && p.per_node > 0 && p.np != p.per_node)
        LOOM_FAIL("launch: {} ranks on this machine, but {} per node ({}); name the nodes with "
                  "--hosts or --hostfile, or start {} ranks",
                  p.np, p.per_node,
                  r.nproc_per_node > 0 ? std::string("--nproc-per-node")
                                       : job_src + ": distribution.mpi.processes_per_host",
                  p.per_node);
    if (!p.hosts.empty())
        LOOM_CHECK(p.np <= slots,
                   "launch: {} ranks but the hosts offer {} slots ({}); give more hosts or slots, or "
                   "--nproc-per-node",
                   p.np, slots, hosts_text(p.hosts));

    // Threads: this machine's cores shared by the ranks of one node.
    const int on_node = p.per_node > 0 ? p.per_node
                        : !p.hosts.empty()
                            ? std::max_element(p.hosts.begin(), p.hosts.end(),
                                               [](const HostSlots& a, const HostSlots& b) {
                                                   return a.slots < b.slots;
                                               })->slots
                        : p.in_allocation ? (p.np + nodes - 1) / nodes
                                          : p.np;
    if (r.threads > 0) {
        // The nodes' size is known to the caller, not to this machine (a
        // launcher pod or login node may have one core).
        p.threads = r.threads;
    } else {
        p.oversubscribe = on_node > r.local_cores;
        p.threads = std::max(1, r.local_cores / std::max(1, on_node));
    }

    if (nodes > 1 && tp > 1 && on_node > 0) {
        const bool cluster = placement == "cluster" || placement.back() == 'T';
        if (cluster && on_node % tp != 0)
            p.notes.push_back(fmt::format(
                "tensor groups of {} ranks cross nodes: {} ranks per node is not a multiple of "
                "distribution.tensor_parallel_degree {}; every layer then talks over the network",
                tp, on_node, tp));
        else if (cluster)
            p.notes.push_back(fmt::format(
                "placement_strategy {}: each tensor group of {} ranks is inside one node", placement,
                tp));
        else
            p.notes.push_back(fmt::format(
                "placement_strategy {}: tensor-parallel rank varies slower than data-parallel "
                "rank, so tensor groups span nodes",
                placement));
    }
    return p;
}

}  // namespace loom::cli
