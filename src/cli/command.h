// Subcommand registry: each cmd_<name>.cpp registers itself with
// LOOM_COMMAND, so adding a command touches only its own file.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <vector>

namespace loom::cli {

// `setup` adds a subcommand to the app and sets its callback.
using CommandSetup = std::function<void(CLI::App& app)>;

std::vector<CommandSetup>& command_registry();

struct CommandRegistrar {
    explicit CommandRegistrar(CommandSetup setup) { command_registry().push_back(std::move(setup)); }
};

}  // namespace loom::cli

#define LOOM_CONCAT_INNER(a, b) a##b
#define LOOM_CONCAT(a, b) LOOM_CONCAT_INNER(a, b)
#define LOOM_COMMAND(setup_fn) \
    static ::loom::cli::CommandRegistrar LOOM_CONCAT(loom_command_, __LINE__)(setup_fn)
