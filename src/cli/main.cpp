// loom: the command-line entry point. Subcommands live in cmd_*.cpp and
// register themselves (cli/command.h); errors from anywhere below arrive here
// as loom::Error and are printed as one clear line, once per job: under
// mpirun an error that every rank hits is printed by rank 0 alone, and one
// that only other ranks hit by those ranks, each naming itself
// (parallel/mpi_job.h).
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <string>

#include "cli/command.h"
#include "cli/sagemaker_env.h"
#include "core/check.h"
#include "core/runtime.h"
#include "parallel/mpi_job.h"

namespace loom::cli {
std::vector<CommandSetup>& command_registry() {
    static std::vector<CommandSetup> registry;
    return registry;
}

namespace {

int report_error(const char* what) {
    const std::string message = what;
    const int rank = loom::job_rank();
    if (rank > 0 && loom::same_error_on_rank0(message)) return 1;  // rank 0 printed it
    if (rank > 0)
        fmt::print(stderr, "loom: error (rank {}): {}\n", rank, message);
    else
        fmt::print(stderr, "loom: error: {}\n", message);
    std::fflush(stderr);
    if (rank == 0) loom::announce_error(message);
    return 1;
}

}  // namespace

}  // namespace loom::cli

int main(int argc, char** argv) {
    loom::runtime_exec_with_wait_policy(argv);
    loom::runtime_init();
    CLI::App app{
        "Loom trains and fine-tunes transformer language models (BERT, RoBERTa, DistilBERT,\n"
        "ALBERT, GPT-2) from Hugging Face checkpoints.\n"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "loom 0.1.0");
    for (auto& setup : loom::cli::command_registry()) setup(app);
    // SageMaker runs an image's entry point with the one argument `train`.
    std::vector<char*> args(argv, argv + argc);
    char sagemaker[] = "sagemaker";
    if (loom::cli::started_as_sagemaker_train(argc, argv)) args.insert(args.begin() + 1, sagemaker);
    try {
        app.parse(int(args.size()), args.data());
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const std::exception& e) {
        return loom::cli::report_error(e.what());
    }
    return 0;
}
