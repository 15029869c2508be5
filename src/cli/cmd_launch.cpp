// `loom launch [--nproc N] job.yaml [-- extra args]`: runs the job's ranks
// through Open MPI's mpirun, on this machine or across hosts, with the flags
// this kind of machine needs, so users never write an mpirun line by hand:
//   --allow-run-as-root           when running as root (containers)
//   --host h1:N,h2:N | --hostfile across nodes: Open MPI starts its daemons
//                                 there with its rsh/ssh agent (inside a Slurm
//                                 allocation mpirun reads the allocation)
//   --map-by slot[:PE=T]          ranks fill one node before the next, so
//                                 tensor groups (fastest-varying with
//                                 placement_strategy cluster) share a node;
//                                 PE=T binds each rank to its own T CPUs
//   --use-hwthread-cpus, --bind-to hwthread | none
//                                 CPUs counted as the affinity mask counts
//                                 them (hardware threads); binding only when
//                                 every rank gets CPUs of its own
//   --oversubscribe               when a node gets more ranks than cores
//   -x OMP_NUM_THREADS=cores/N    (at least 1) so ranks do not fight for cores
//   -x MALLOC_*_                  keep freed memory mapped (machine-notes: first
//                                 touch costs ~14 us per page; also set by
//                                 runtime_init, but the variables act before
//                                 MPI_Init allocates)
//   --stdin none                  mpirun runs in its own process group (below)
//   OMPI_MCA_orte_tmpdir_base     (environment, local launches) a session
//                                 directory of this launch's own: Open MPI 4's
//                                 mpiruns share /tmp/ompi.<host>.<uid> and one
//                                 ending removes it while another starting
//                                 creates it, so a few in a hundred of several
//                                 jobs started at once on a node fail with
//                                 "A call to mkdir was unable to create the
//                                 desired directory" (open-mpi/ompi#8510)
//   the job's custom_mpi_options  (SageMaker's distribution.mpi block)
// and then `<this loom> <cmd> job.yaml extra...` (cmd defaults to train). The
// rank count and ranks per node come from launch_plan.h.
//
// Signals: mpirun runs in its own process group so that a terminal's Ctrl-C
// reaches only this launcher. Open MPI's mpirun kills its ranks within about a
// second when it gets SIGINT/SIGTERM itself (and refuses to forward those two),
// which would cut a checkpoint short. So the first SIGINT/SIGTERM/SIGHUP/SIGUSR1
// is delivered straight to the rank processes (mpirun's children; SIGHUP as
// SIGTERM): `loom train` then finishes its step, checkpoints and exits 75, and
// so does the launch. Ranks on other nodes are not our processes' children:
// there mpirun gets SIGUSR1, which it forwards to every rank, and loom train
// stops on it as on SIGTERM. A second signal goes to mpirun, which kills the
// job. If the launcher dies, PR_SET_PDEATHSIG sends mpirun SIGTERM.
//
// Failures: mpirun's stderr passes through this process, which keeps it and,
// when the job fails, names the failing rank from mpirun's report ("Process
// name: [[jobid,1],R] Exit code: C", "MPI_ABORT was invoked on rank R",
// "process rank R ... exited on signal S"). The exit status is mpirun's.
//
// Under Slurm, srun can start the ranks instead (docs/slurm.md); on
// Kubernetes, an MPIJob's launcher runs this same command
// (docs/kubernetes-mpijob.yaml).
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/launch_plan.h"
#include "core/check.h"
#include "core/stop_signals.h"

namespace loom::cli {

namespace {

struct LaunchOptions {
    int nproc = 0;  // 0 = from the job or the hosts (launch_plan.h)
    int nproc_per_node = 0;
    int threads = 0;
    std::string hosts, hostfile;
    std::string cmd = "train";
    std::string job;
    std::vector<std::string> args;  // after `--`, passed to every rank
    std::string mpirun = "mpirun";
    std::vector<std::string> mpi_args;
    bool tag_output = false;
    bool dry_run = false;
};

// The launcher's only process-wide state: a signal handler can reach nothing
// else. Written before the handlers are installed.
volatile sig_atomic_t g_child_pid = 0;
volatile sig_atomic_t g_signal = 0;        // first signal received (0: none)
volatile sig_atomic_t g_signal_count = 0;

// Async-signal-safe: records the signal; the second one kills mpirun at once.
// The first is handled by the read loop (a directory scan is not signal-safe).
void on_signal(int sig) {
    if (g_signal == 0) g_signal = sig;
    g_signal_count = g_signal_count + 1;
    if (g_signal_count >= 2 && g_child_pid > 0) kill(pid_t(g_child_pid), SIGTERM);
}

// Processes whose parent is `parent` (the ranks of a local mpirun).
std::vector<pid_t> children_of(pid_t parent) {
    std::vector<pid_t> kids;
    DIR* proc = opendir("/proc");
    if (!proc) return kids;
    while (dirent* e = readdir(proc)) {
        char* end = nullptr;
        long pid = std::strtol(e->d_name, &end, 10);
        if (*end != '\0' || pid <= 0) continue;
        std::FILE* f = std::fopen(fmt::format("/proc/{}/stat", pid).c_str(), "r");
        if (!f) continue;
        char buf[1024];
        size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
        std::fclose(f);
        buf[n] = '\0';
        // "pid (comm) state ppid ...": comm may hold spaces, so scan from the last ')'.
        const char* close = std::strrchr(buf, ')');
        char state = 0;
        long ppid = 0;
        if (close && std::sscanf(close + 1, " %c %ld", &state, &ppid) == 2 && ppid == parent)
            kids.push_back(pid_t(pid));
    }
    closedir(proc);
    return kids;
}

// Whether `pid` has blocked or caught SIGTERM, i.e. has got far enough to
// stop cleanly (`loom train` blocks the stop signals first thing); before
// that a signal would kill it mid-start. Read from /proc/<pid>/status.
bool stop_ready(pid_t pid) {
    std::FILE* f = std::fopen(fmt::format("/proc/{}/status", pid).c_str(), "r");
    if (!f) return false;
    char line[256];
    unsigned long long blocked = 0, caught = 0;
    while (std::fgets(line, sizeof(line), f)) {
        if (std::strncmp(line, "SigBlk:", 7) == 0) blocked = std::strtoull(line + 7, nullptr, 16);
        if (std::strncmp(line, "SigCgt:", 7) == 0) caught = std::strtoull(line + 7, nullptr, 16);
    }
    std::fclose(f);
    const unsigned long long term = 1ull << (SIGTERM - 1);
    return ((blocked | caught) & term) != 0;
}

int usable_cores() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? int(n) : 1;
}

std::string self_exe() {
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    LOOM_CHECK(n > 0, "launch: cannot find the loom binary (/proc/self/exe): {}",
               std::strerror(errno));
    return std::string(buf, size_t(n));
}

// A fresh directory for this launch's Open MPI session files, under the base
// the user gave Open MPI, else TMPDIR, else /tmp; "" if it cannot be made (the
// launch then runs with Open MPI's default, as before).
std::string private_session_base() {
    const char* base = std::getenv("OMPI_MCA_orte_tmpdir_base");
    if (!base || !*base) base = std::getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    std::string templ = fmt::format("{}/loom-launch-XXXXXX", base);
    if (!mkdtemp(templ.data())) return "";
    return templ;
}

std::string shell_quote(const std::string& s) {
    if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_-+=/.,:@%") == std::string::npos)
        return s;
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

// The --set values among the arguments for the ranks, so that the plan reads
// the job as the ranks will.
std::vector<std::string> set_overrides(const std::vector<std::string>& args) {
    std::vector<std::string> sets;
    for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--set" && i + 1 < args.size()) sets.push_back(args[++i]);
        else if (args[i].rfind("--set=", 0) == 0) sets.push_back(args[i].substr(6));
    }
    return sets;
}

LaunchPlan plan_for(const LaunchOptions& o) {
    LaunchRequest r;
    r.nproc = o.nproc;
    r.nproc_per_node = o.nproc_per_node;
    r.hosts = o.hosts;
    r.hostfile = o.hostfile;
    r.job = o.job;
    r.job_overrides = set_overrides(o.args);
    r.local_cores = usable_cores();
    r.threads = o.threads;
    return plan_launch(r);
}

std::vector<std::string> build_command(const LaunchOptions& o, const LaunchPlan& p,
                                       const std::string& loom_exe) {
    std::vector<std::string> argv = {o.mpirun};
    if (geteuid() == 0) argv.push_back("--allow-run-as-root");
    argv.insert(argv.end(), {"-np", std::to_string(p.np)});
    if (p.hosts_from_file) {
        argv.insert(argv.end(), {"--hostfile", o.hostfile});
    } else if (!p.hosts.empty()) {
        std::string list;
        for (const auto& h : p.hosts) list += fmt::format("{}{}:{}", list.empty() ? "" : ",", h.name, h.slots);
        argv.insert(argv.end(), {"--host", list});
    }
    if (p.oversubscribe) argv.push_back("--oversubscribe");
    // Inside an allocation with a fixed count per node: N on every node, in
    // node order. Otherwise fill each host's slots in turn.
    const std::string map = p.in_allocation && p.per_node > 0
                                ? fmt::format("ppr:{}:node", p.per_node)
                                : std::string("slot");
    if (p.oversubscribe)
        argv.insert(argv.end(), {"--map-by", map, "--bind-to", "none"});
    else
        // PE counts hardware threads, as usable_cores() does: on SMT machines
        // counting cores would ask for more than there are.
        argv.insert(argv.end(), {"--use-hwthread-cpus", "--map-by",
                                 fmt::format("{}:PE={}", map, p.threads), "--bind-to", "hwthread"});
    argv.insert(argv.end(), {"--stdin", "none"});
    if (o.tag_output) argv.push_back("--tag-output");
    argv.insert(argv.end(), {"-x", fmt::format("OMP_NUM_THREADS={}", p.threads)});
    argv.insert(argv.end(), {"-x", "MALLOC_MMAP_THRESHOLD_=1073741824"});
    argv.insert(argv.end(), {"-x", "MALLOC_TRIM_THRESHOLD_=1073741824"});
    argv.insert(argv.end(), {"-x", "MALLOC_TOP_PAD_=67108864"});
    argv.insert(argv.end(), p.custom_mpi_options.begin(), p.custom_mpi_options.end());
    argv.insert(argv.end(), o.mpi_args.begin(), o.mpi_args.end());
    argv.push_back(loom_exe);
    argv.push_back(o.cmd);
    if (!o.job.empty()) argv.push_back(o.job);
    argv.insert(argv.end(), o.args.begin(), o.args.end());
    return argv;
}

// Names the failing rank from mpirun's report, or returns "".
std::string describe_failure(const std::string& err) {
    std::smatch m;
    static const std::regex abort_re(R"(MPI_ABORT was invoked on rank (\d+) in communicator \S+\s+with errorcode (\d+))");
    static const std::regex exit_re(R"(Process name: \[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s*(\d+))");
    static const std::regex signal_re(R"(process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)( \(([^)]*)\))?)");
    if (std::regex_search(err, m, abort_re))
        return fmt::format("rank {} aborted the job (MPI_Abort, error code {})", m[1].str(), m[2].str());
    if (std::regex_search(err, m, exit_re))
        return fmt::format("rank {} failed (exit code {})", m[1].str(), m[2].str());
    if (std::regex_search(err, m, signal_re))
        return fmt::format("rank {} was killed by signal {}{}", m[1].str(), m[2].str(),
                           m[4].matched ? " (" + m[4].str() + ")" : "");
    return "";
}

int run_launch(const LaunchOptions& o) {
    const LaunchPlan plan = plan_for(o);
    for (const auto& n : plan.notes) fmt::print(stderr, "loom launch: {}\n", n);
    std::vector<std::string> argv = build_command(o, plan, self_exe());
    std::string line;
    for (const auto& a : argv) line += (line.empty() ? "" : " ") + shell_quote(a);
    if (o.dry_run) {
        fmt::print("{}\n", line);
        return 0;
    }
    fmt::print(stderr, "loom launch: {}\n", line);
    std::fflush(stdout);
    std::fflush(stderr);

    // Ranks on other hosts would need the directory there too: those keep Open
    // MPI's default, as one node rarely starts several multi-node jobs at once.
    const bool local = plan.hosts.empty() && !plan.in_allocation;
    const std::string session_base = local ? private_session_base() : "";

    int err_pipe[2];
    LOOM_CHECK(pipe2(err_pipe, O_CLOEXEC) == 0, "launch: pipe: {}", std::strerror(errno));
    const pid_t parent = getpid();
    pid_t pid = fork();
    LOOM_CHECK(pid >= 0, "launch: fork: {}", std::strerror(errno));
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(127);  // the launcher already died
        dup2(err_pipe[1], STDERR_FILENO);
        if (!session_base.empty()) setenv("OMPI_MCA_orte_tmpdir_base", session_base.c_str(), 1);
        std::vector<char*> cargv;
        for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
        cargv.push_back(nullptr);
        execvp(cargv[0], cargv.data());
        std::fprintf(stderr, "loom launch: cannot run %s: %s\n", cargv[0], std::strerror(errno));
        _exit(127);
    }
    close(err_pipe[1]);
    g_child_pid = pid;
    struct sigaction sa {};
    sa.sa_handler = on_signal;  // no SA_RESTART: read() below returns EINTR
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1}) sigaction(sig, &sa, nullptr);
    bool ranks_signalled = false;
    auto pass_first_signal = [&] {
        if (g_signal == 0 || ranks_signalled) return;
        ranks_signalled = true;
        // loom train stops gracefully on SIGTERM, SIGINT and SIGUSR1 only.
        const int sig = g_signal == SIGHUP ? SIGTERM : int(g_signal);
        // A signal in the first moments may find ranks not started or not
        // yet able to stop cleanly: wait (up to 10 s) for all of them.
        if (!plan.hosts.empty() || plan.in_allocation) {
            // Ranks on other nodes: mpirun forwards SIGUSR1 to every one.
            kill(pid, SIGUSR1);
            fmt::print(stderr,
                       "loom launch: passed SIGUSR1 through mpirun to the {} ranks to let them "
                       "stop cleanly; signal again to kill the job\n",
                       plan.np);
            return;
        }
        std::vector<pid_t> ranks = children_of(pid);
        for (int i = 0; i < 500; ++i) {
            if (int(ranks.size()) >= plan.np && std::all_of(ranks.begin(), ranks.end(), stop_ready))
                break;
            siginfo_t ended{};
            if (waitid(P_PID, id_t(pid), &ended, WEXITED | WNOHANG | WNOWAIT) == 0 &&
                ended.si_pid != 0)
                break;  // mpirun is gone (reaped below)
            usleep(20000);
            ranks = children_of(pid);
        }
        for (pid_t r : ranks) kill(r, sig);
        if (ranks.empty()) kill(pid, SIGTERM);  // nothing to ask: stop mpirun
        fmt::print(stderr,
                   "loom launch: passed {} to {} rank(s) to let them stop cleanly; signal again "
                   "to kill the job\n",
                   strsignal(sig), ranks.size());
    };

    // Pass mpirun's stderr through, keeping the last 256 KiB for the report.
    std::string err;
    char buf[4096];
    while (true) {
        ssize_t n = read(err_pipe[0], buf, sizeof(buf));
        pass_first_signal();
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        fwrite(buf, 1, size_t(n), stderr);
        fflush(stderr);
        err.append(buf, size_t(n));
        if (err.size() > (512u << 10)) err.erase(0, err.size() - (256u << 10));
    }
    close(err_pipe[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) pass_first_signal();
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (!session_base.empty()) {
        // Open MPI empties it on a clean end; ranks killed hard leave files.
        std::error_code ec;
        std::filesystem::remove_all(session_base, ec);
    }
    if (g_signal != 0) {
        // Ranks that checkpointed and stopped (75) or had finished anyway (0)
        // keep their status; otherwise the shell's "killed by signal".
        const bool clean = rc == 0 || rc == k_exit_stopped_by_signal;
        fmt::print(stderr, "loom launch: job stopped on signal {} ({}){}\n", int(g_signal),
                   strsignal(g_signal),
                   rc == k_exit_stopped_by_signal
                       ? "; every rank stopped after the checkpoint (exit status 75: run the "
                         "same command again to continue)"
                       : (rc == 0 ? "; every rank exited cleanly"
                                  : fmt::format("; mpirun exited with status {}", rc)));
        return clean ? rc : 128 + g_signal;
    }
    if (rc == 127 && err.find("loom launch: cannot run") != std::string::npos) return rc;
    if (rc != 0) {
        std::string who = describe_failure(err);
        if (who.empty())
            fmt::print(stderr, "loom launch: mpirun exited with status {}\n", rc);
        else
            fmt::print(stderr, "loom launch: {}; see its messages above\n", who);
    }
    return rc;
}

void setup_launch(CLI::App& app) {
    auto o = std::make_shared<LaunchOptions>();
    CLI::App* sub = app.add_subcommand(
        "launch", "Run a Loom command (default: train) on N local ranks through mpirun");
    sub->footer(R"(
Builds and runs:  mpirun [--allow-run-as-root] -np N [--host h1:K,h2:K | --hostfile F]
                  [--oversubscribe] [--use-hwthread-cpus] --map-by slot[:PE=T]
                  --bind-to hwthread|none
                  --stdin none -x OMP_NUM_THREADS=<T = cores/K> -x MALLOC_..._=...
                  [custom_mpi_options] <loom> <cmd> job.yaml [extra args]
N is --nproc, else distribution.data_parallel_degree x pipeline x tensor
degrees from the job file, else K x nodes; K (ranks per node) is
--nproc-per-node, else distribution.mpi.processes_per_host, else the host's
slots; T is --threads, else this machine's cores / K. Ranks fill one node
before the next. Use --dry-run to print the line.
The first Ctrl-C, SIGTERM, SIGHUP or SIGUSR1 is passed to the ranks (loom
train checkpoints and exits 75; the launch too); a second one kills the job.
If a rank fails, its rank number is printed at the end.
Examples:
  loom launch --nproc 4 job.yaml
  loom launch --nproc 2 job.yaml -- --set learning_rate=1e-4
  loom launch --hosts node1:8,node2:8 job.yaml
  loom launch --hostfile hosts.txt --nproc-per-node 4 job.yaml
Open MPI reaches other hosts over ssh (--mpi-arg=--mca --mpi-arg=plm_rsh_agent
--mpi-arg=CMD for another agent). Under Slurm srun can start the ranks; see
docs/slurm.md and docs/kubernetes-mpijob.yaml.)");
    sub->add_option("--nproc,-n", o->nproc,
                    "number of ranks (default: from the job's distribution degrees or the hosts)");
    sub->add_option("--nproc-per-node", o->nproc_per_node,
                    "ranks per node (default: distribution.mpi.processes_per_host or the host's slots)");
    sub->add_option("--hosts", o->hosts, "hosts and their slots: host1:8,host2:8");
    sub->add_option("--hostfile", o->hostfile, "Open MPI hostfile ('host slots=N' lines)");
    sub->add_option("--threads", o->threads,
                    "OpenMP threads per rank (default: this machine's cores / ranks per node; "
                    "give it when the nodes differ from the launching machine)");
    sub->add_option("--cmd", o->cmd, "the loom subcommand every rank runs")->capture_default_str();
    sub->add_option("--mpirun", o->mpirun, "the mpirun to use")->capture_default_str();
    sub->add_option("--mpi-arg", o->mpi_args,
                    "extra argument for mpirun, before the program (repeatable)")
        ->allow_extra_args(false);
    sub->add_flag("--tag-output", o->tag_output, "prefix every output line with its rank");
    sub->add_flag("--dry-run", o->dry_run, "print the mpirun command and exit");
    sub->add_option("job", o->job, "job file passed to the command (job.yaml)")->required();
    sub->add_option("args", o->args, "after --: extra arguments for the command on every rank");
    sub->callback([o] {
        int rc = run_launch(*o);
        std::fflush(stdout);
        std::fflush(stderr);
        if (rc != 0) std::exit(rc);
    });
}

}  // namespace

LOOM_COMMAND(setup_launch);

}  // namespace loom::cli
