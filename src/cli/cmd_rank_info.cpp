// `loom rank-info` (hidden): prints what MPI and the topology say about this
// rank, proves the ranks can talk (an all-reduce of the rank numbers), and can
// fail or linger on request. While lingering (--sleep-s) SIGINT/SIGTERM end the
// wait early and the rank exits cleanly, as `loom train` does after its
// checkpoint; --ignore-signals makes it ignore them instead. It exists to test `loom launch` and a cluster
// set-up (Slurm, MPIJob) before a real job runs:
//   mpirun -np 2 loom rank-info --tp 2
//   loom launch --nproc 2 --cmd rank-info job.yaml -- --fail-rank 1
// Unknown arguments (the job file, train options passed through launch) are
// printed, not rejected.
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "cli/command.h"
#include "comm/comm_mpi.h"
#include "core/check.h"
#include "core/runtime.h"
#include "parallel/topology.h"

namespace loom::cli {

namespace {

struct RankInfoOptions {
    int tp = 1, pp = 1;
    std::string placement = "cluster";  // as distribution.placement_strategy
    std::string order;                   // overrides placement when given
    int fail_rank = -1;
    double sleep_s = 0;
    bool ignore_signals = false;
};

volatile std::sig_atomic_t g_stop_signal = 0;  // set by the handler only
extern "C" void rank_info_on_signal(int sig) { g_stop_signal = sig; }

void run_rank_info(const RankInfoOptions& o, const std::vector<std::string>& extra) {
    MpiSession mpi;
    auto world = comm_mpi_world();
    const int rank = world->rank(), size = world->size();
    LOOM_CHECK(size % (o.tp * o.pp) == 0, "rank-info: {} ranks are not divisible by tp {} x pp {}",
               size, o.tp, o.pp);
    TopologyConfig cfg;
    cfg.tp = o.tp;
    cfg.pp = o.pp;
    cfg.dp = size / (o.tp * o.pp);
    cfg.order = o.order.empty() ? topology_order_from_placement(o.placement) : o.order;
    Topology topo(cfg, size, rank);
    int64_t sum = rank;
    world->all_reduce(std::span<int64_t>(&sum, 1), ReduceOp::sum)->wait();
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    const char* omp = std::getenv("OMP_NUM_THREADS");
    std::string args;
    for (const auto& a : extra) args += " " + a;
    const char* session = std::getenv("OMPI_MCA_orte_tmpdir_base");
    fmt::print(
        "rank {} of {}: {} | host {} pid {} | OMP_NUM_THREADS={} threads {} | mpi session "
        "base {} | sum of ranks {} | args:{}\n",
        rank, size, topo.to_string(), host, getpid(), omp ? omp : "(unset)", runtime_threads(),
        session ? session : "(default)", sum, args);
    std::fflush(stdout);
    if (o.sleep_s > 0) {
        for (int sig : {SIGINT, SIGTERM})
            std::signal(sig, o.ignore_signals ? SIG_IGN : rank_info_on_signal);
        const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.sleep_s);
        while (std::chrono::steady_clock::now() < until && g_stop_signal == 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (g_stop_signal != 0) {
            fmt::print("rank {}: stopping on signal {}\n", rank, int(g_stop_signal));
            std::fflush(stdout);
        }
    }
    LOOM_CHECK(rank != o.fail_rank, "rank-info: failing on rank {} as asked (--fail-rank)", rank);
    world->barrier()->wait();
}

void setup_rank_info(CLI::App& app) {
    auto o = std::make_shared<RankInfoOptions>();
    CLI::App* sub = app.add_subcommand("rank-info", "Print MPI rank, size and topology (testing)");
    sub->group("");  // hidden from --help
    sub->allow_extras();
    sub->add_option("--tp", o->tp, "tensor-parallel size for the printed topology");
    sub->add_option("--pp", o->pp, "pipeline-parallel size for the printed topology");
    sub->add_option("--placement", o->placement,
                    "SMP placement_strategy: cluster, spread or a permutation of DPT")
        ->capture_default_str();
    sub->add_option("--order", o->order, "topology order string (e.g. tp-dp-pp), overrides --placement");
    sub->add_option("--fail-rank", o->fail_rank, "exit with an error on this rank");
    sub->add_option("--sleep-s", o->sleep_s, "wait this long before finishing");
    sub->add_flag("--ignore-signals", o->ignore_signals, "ignore SIGINT/SIGTERM while waiting");
    sub->callback([o, sub] { run_rank_info(*o, sub->remaining()); });
}

}  // namespace

LOOM_COMMAND(setup_rank_info);

}  // namespace loom::cli
