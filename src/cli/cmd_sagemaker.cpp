// `loom sagemaker [train]`: Loom as a SageMaker training job's entry point
// (the image's ENTRYPOINT; SageMaker runs it with the argument `train`).
//
// Reads the contract (sagemaker_env.h), checks the job the hyperparameters
// describe exactly as a job file is checked (errors name the hyperparameter,
// e.g. `hyperparameters.json: "epochs"`), then:
//   - the leader (the first of the sorted hosts) runs the ranks: `loom train`
//     for one rank, `loom launch --nproc K` on one host, or `loom launch
//     --hosts h1,h2,... --nproc-per-node K` across hosts, as SageMaker's MPI
//     set-up does (K: distribution.mpi.processes_per_host, else one rank per
//     GPU with smdistributed/mpi enabled, else 1); with ssh as Open MPI's
//     agent it first waits for every other host's sshd;
//   - every other host starts sshd (LOOM_SAGEMAKER_SSHD, default
//     `/usr/sbin/sshd -D`; empty = none) and waits while the leader's Open MPI
//     daemon (orted) runs here, then exits 0.
// Checkpoints go to <root>/checkpoints (output_dir), which SageMaker restores
// from checkpoint_s3_uri, so a restarted job resumes; after a successful run
// the model files are copied to SM_MODEL_DIR and metrics.jsonl/report.html to
// SM_OUTPUT_DATA_DIR. A failure's reason goes to <root>/output/failure. A
// SIGTERM (StopTrainingJob, spot interruption) is passed to the ranks, which
// checkpoint and exit 75. docs/sagemaker.md has the metric_definitions regexes.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/command.h"
#include "cli/sagemaker_env.h"
#include "config/job.h"
#include "core/check.h"
#include "core/stop_signals.h"

namespace loom::cli {

namespace {

namespace fs = std::filesystem;

volatile sig_atomic_t g_child = 0;
void forward_signal(int sig) {
    if (g_child > 0) kill(pid_t(g_child), sig);
}

std::string self_exe() {
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    LOOM_CHECK(n > 0, "sagemaker: cannot find the loom binary: {}", std::strerror(errno));
    return std::string(buf, size_t(n));
}

// Runs argv, passing its stderr through and keeping the tail; forwards
// SIGTERM/SIGINT/SIGUSR1 to it. Returns the exit status (128+sig if killed).
int run_child(const std::vector<std::string>& argv, std::string& err_tail) {
    int fds[2];
    LOOM_CHECK(pipe2(fds, O_CLOEXEC) == 0, "sagemaker: pipe: {}", std::strerror(errno));
    pid_t pid = fork();
    LOOM_CHECK(pid >= 0, "sagemaker: fork: {}", std::strerror(errno));
    if (pid == 0) {
        dup2(fds[1], STDERR_FILENO);
        std::vector<char*> cargv;
        for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
        cargv.push_back(nullptr);
        execv(cargv[0], cargv.data());
        std::fprintf(stderr, "loom: error: sagemaker: cannot run %s: %s\n", cargv[0],
                     std::strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    g_child = pid;
    struct sigaction sa {};
    sa.sa_handler = forward_signal;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaction(sig, &sa, nullptr);
    char buf[4096];
    while (true) {
        ssize_t n = read(fds[0], buf, sizeof(buf));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        fwrite(buf, 1, size_t(n), stderr);
        fflush(stderr);
        err_tail.append(buf, size_t(n));
        if (err_tail.size() > (128u << 10)) err_tail.erase(0, err_tail.size() - (64u << 10));
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The lines that say why a run failed: Loom's own error lines and the
// launcher's verdict, else the last lines.
std::string failure_reason(const std::string& tail) {
    std::string reason, line;
    std::istringstream in(tail);
    std::vector<std::string> lines;
    while (std::getline(in, line)) {
        lines.push_back(line);
        if (line.rfind("loom: error:", 0) == 0 || line.rfind("loom launch: rank", 0) == 0)
            if (reason.find(line) == std::string::npos) reason += line + "\n";
    }
    if (!reason.empty()) return reason;
    for (size_t i = lines.size() > 20 ? lines.size() - 20 : 0; i < lines.size(); ++i)
        reason += lines[i] + "\n";
    return reason;
}

void write_failure(const SageMakerEnv& e, const std::string& reason) {
    std::error_code ec;
    fs::create_directories(fs::path(e.failure_file).parent_path(), ec);
    std::ofstream(e.failure_file) << reason;
}

bool port_open(const std::string& host, int port) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return false;
    bool ok = false;
    for (addrinfo* a = res; a && !ok; a = a->ai_next) {
        int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (s < 0) continue;
        ok = connect(s, a->ai_addr, a->ai_addrlen) == 0;
        close(s);
    }
    freeaddrinfo(res);
    return ok;
}

bool orted_running() {
    for (const auto& d : fs::directory_iterator("/proc")) {
        std::ifstream comm(d.path() / "comm");
        std::string name;
        if (comm && std::getline(comm, name) && name == "orted") return true;
    }
    return false;
}

double wait_limit_s() {
    const char* v = std::getenv("LOOM_SAGEMAKER_WAIT_S");
    return v ? std::atof(v) : 600.0;
}

// A host other than the leader: serve ssh, wait for the leader's job here.
int run_worker(const SageMakerEnv& e) {
    const char* sshd_env = std::getenv("LOOM_SAGEMAKER_SSHD");
    const std::string sshd = sshd_env ? sshd_env : "/usr/sbin/sshd -D";
    if (!sshd.empty()) {
        pid_t pid = fork();
        if (pid == 0) {
            execl("/bin/sh", "sh", "-c", sshd.c_str(), static_cast<char*>(nullptr));
            _exit(127);
        }
    }
    fmt::print(stderr, "loom sagemaker: {} waits for the leader {} to start the job here\n",
               e.current_host, e.leader());
    using clock = std::chrono::steady_clock;
    const auto until = clock::now() + std::chrono::duration<double>(wait_limit_s());
    while (!orted_running()) {
        if (clock::now() > until) {
            write_failure(e, fmt::format("host {}: the leader {} started no MPI job here within "
                                         "{} s (LOOM_SAGEMAKER_WAIT_S)\n",
                                         e.current_host, e.leader(), wait_limit_s()));
            return 1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    fmt::print(stderr, "loom sagemaker: {}: the leader's job runs here\n", e.current_host);
    while (orted_running()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    fmt::print(stderr, "loom sagemaker: {}: the leader's job has ended here\n", e.current_host);
    return 0;
}

void copy_results(const SageMakerEnv& e) {
    fs::create_directories(e.model_dir);
    fs::create_directories(e.output_data_dir);
    std::vector<std::string> to_model, to_output;
    for (const auto& f : fs::directory_iterator(e.checkpoint_dir)) {
        if (!f.is_regular_file()) continue;
        const std::string name = f.path().filename().string();
        const bool report = name == "metrics.jsonl" || name == "report.html";
        fs::copy_file(f.path(), fs::path(report ? e.output_data_dir : e.model_dir) / name,
                      fs::copy_options::overwrite_existing);
        (report ? to_output : to_model).push_back(name);
    }
    fmt::print(stderr, "loom sagemaker: model ({}) copied to {}; {} to {}\n",
               fmt::join(to_model, ", "), e.model_dir, fmt::join(to_output, ", "),
               e.output_data_dir);
}

int run_sagemaker() {
    SageMakerEnv e;
    // Known before anything is read, so that a bad contract is reported too.
    const char* root = std::getenv("LOOM_SAGEMAKER_ROOT");
    e.failure_file = std::string(root && *root ? root : "/opt/ml") + "/output/failure";
    try {
        e = read_sagemaker_env();
        for (const auto& n : e.notes) fmt::print(stderr, "loom sagemaker: {}\n", n);
        std::error_code ec;
        if (fs::is_directory(e.code_dir)) fs::current_path(e.code_dir);
        std::string job_file = e.base_job;
        if (job_file.empty()) {
            // No base job: the hyperparameters are the whole job. The file
            // sits at the same path on every host, for every rank to read.
            job_file = e.root + "/loom/job.yaml";
            fs::create_directories(fs::path(job_file).parent_path());
            std::ofstream(job_file) << "# the job is given by the SageMaker hyperparameters\n{}\n";
        }
        if (!e.is_leader()) return run_worker(e);

        // Checked here, where errors name the hyperparameter, before any rank starts.
        JobParseOptions po;
        po.for_training = true;
        po.override_base_dir = fs::current_path().string();
        po.override_labels = e.labels;
        const Job job = job_load(job_file, e.overrides, po);
        const DistributionArgs& d = job.distribution;
        int per_host = int(d.processes_per_host);
        if (per_host == 0 && (d.smddp || d.mpi_enabled)) per_host = std::max(1, e.num_gpus);
        if (per_host == 0) per_host = 1;
        fs::create_directories(e.checkpoint_dir);

        const std::string loom = self_exe();
        std::vector<std::string> argv = {loom};
        if (e.hosts.size() > 1) {
            if (!std::getenv("OMPI_MCA_plm_rsh_agent")) {
                // Open MPI reaches the other hosts over ssh: wait for their sshd.
                const auto until = std::chrono::steady_clock::now() +
                                   std::chrono::duration<double>(wait_limit_s());
                for (const auto& h : e.hosts) {
                    if (h == e.current_host) continue;
                    while (!port_open(h, 22)) {
                        LOOM_CHECK(std::chrono::steady_clock::now() < until,
                                   "sagemaker: host {} accepts no ssh connection (port 22) after "
                                   "{} s",
                                   h, wait_limit_s());
                        std::this_thread::sleep_for(std::chrono::seconds(1));
                    }
                }
            }
            argv.insert(argv.end(), {"launch", "--hosts", fmt::format("{}", fmt::join(e.hosts, ",")),
                                     "--nproc-per-node", std::to_string(per_host)});
        } else if (per_host > 1) {
            argv.insert(argv.end(), {"launch", "--nproc", std::to_string(per_host)});
        } else {
            argv.push_back("train");
        }
        argv.push_back(job_file);
        if (argv[1] == "launch") argv.push_back("--");
        for (const auto& o : e.overrides) argv.insert(argv.end(), {"--set", o});
        fmt::print(stderr, "loom sagemaker: {} host(s) x {} rank(s); checkpoints in {}\n",
                   std::max<size_t>(1, e.hosts.size()), per_host, e.checkpoint_dir);
        fflush(stderr);

        std::string tail;
        const int rc = run_child(argv, tail);
        if (rc == 0) {
            copy_results(e);
        } else if (rc == k_exit_stopped_by_signal) {
            fmt::print(stderr, "loom sagemaker: stopped after a checkpoint in {}; a new job with "
                               "the same checkpoint_s3_uri continues from it\n",
                       e.checkpoint_dir);
        } else {
            write_failure(e, failure_reason(tail));
        }
        return rc;
    } catch (const std::exception& ex) {
        const std::string msg = fmt::format("loom: error: {}\n", ex.what());
        fmt::print(stderr, "{}", msg);
        write_failure(e, msg);
        return 1;
    }
}

void setup_sagemaker(CLI::App& app) {
    CLI::App* sub = app.add_subcommand(
        "sagemaker", "Run as a SageMaker training job's entry point (the /opt/ml contract)");
    sub->footer(R"(
Reads /opt/ml/input/config/{hyperparameters,resourceconfig,inputdataconfig}.json
and the SM_* variables (LOOM_SAGEMAKER_ROOT replaces /opt/ml). Hyperparameters:
`job` = a job file relative to /opt/ml/code; every other key is a job key
(model, task, data.max_seq_length, learning_rate, ...). Channels train/eval
become data.train/data.eval; checkpoints go to /opt/ml/checkpoints; the model
to SM_MODEL_DIR; a failure's reason to /opt/ml/output/failure. See
docs/sagemaker.md.)");
    auto mode = std::make_shared<std::string>();
    sub->add_option("mode", *mode, "what SageMaker asks for: train (the default)");
    sub->callback([mode] {
        LOOM_CHECK(mode->empty() || *mode == "train",
                   "sagemaker: '{}' is not served here (training only: `train`)", *mode);
        int rc = run_sagemaker();
        std::fflush(stdout);
        std::fflush(stderr);
        if (rc != 0) std::exit(rc);
    });
}

}  // namespace

LOOM_COMMAND(setup_sagemaker);

}  // namespace loom::cli
