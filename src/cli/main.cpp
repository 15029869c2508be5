// loom: the command-line entry point. Subcommands live in cmd_*.cpp and
// register themselves (cli/command.h); errors from anywhere below arrive here
// as loom::Error and are printed as one clear line.
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "cli/command.h"
#include "core/check.h"
#include "core/runtime.h"

namespace loom::cli {
std::vector<CommandSetup>& command_registry() {
    static std::vector<CommandSetup> registry;
    return registry;
}
}  // namespace loom::cli

int main(int argc, char** argv) {
    loom::runtime_init();
    CLI::App app{
        "Loom trains and fine-tunes transformer language models (BERT, RoBERTa, DistilBERT,\n"
        "ALBERT, GPT-2) from Hugging Face checkpoints.\n"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "loom 0.1.0");
    for (auto& setup : loom::cli::command_registry()) setup(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const loom::Error& e) {
        fmt::print(stderr, "loom: error: {}\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        fmt::print(stderr, "loom: error: {}\n", e.what());
        return 1;
    }
    return 0;
}
