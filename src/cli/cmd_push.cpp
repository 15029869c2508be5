// `loom push DIR --repo org/name`: uploads a finished model folder to the
// Hugging Face Hub as one commit (io/hf_hub.h), creating the repo if needed.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli/command.h"
#include "core/check.h"
#include "io/hf_hub.h"

namespace loom::cli {

namespace {

struct PushOptions {
    std::string dir, repo, message, branch = "main";
    bool is_private = false;
};

void run_push(const PushOptions& o) {
    const HubSettings s = HubSettings::from_environment();
    // Lock and partial files of a run in progress are not part of a model.
    auto skip = [](const std::string& rel) {
        const std::string name = rel.substr(rel.rfind('/') + 1);
        return (name.starts_with(".") && name != ".gitattributes") || name.ends_with(".lock") ||
               name.ends_with(".part") || name.ends_with(".tmp");
    };
    const auto files = hub_folder_files(o.dir, skip);
    LOOM_CHECK(!files.empty(), "{}: no files to push", o.dir);
    hub_create_repo(o.repo, o.is_private, s);
    const std::string title = o.message.empty() ? fmt::format("Upload {} with loom push", o.dir) : o.message;
    const HubCommitResult r = hub_commit_files(o.repo, files, title, s, o.branch);
    fmt::print("pushed {} files from {} to {} (commit {})\n", files.size(), o.dir, o.repo, r.commit);
}

void setup_push(CLI::App& app) {
    auto o = std::make_shared<PushOptions>();
    CLI::App* sub = app.add_subcommand("push", "Upload a model folder to the Hugging Face Hub");
    sub->footer(R"(
Every file under DIR becomes one commit on the repo (created when missing).
Large and binary files go through Git LFS as the Hub asks. The token comes
from HF_TOKEN or the token file ($HF_HOME/token); HF_ENDPOINT names the Hub.
Example:
  loom push out/final --repo my-org/my-model --private
)");
    sub->add_option("dir", o->dir, "the folder to upload")->required();
    sub->add_option("--repo", o->repo, "the Hub repo id (org/name)")->required();
    sub->add_option("--message", o->message, "commit title");
    sub->add_option("--branch", o->branch, "branch to commit to (default main)");
    sub->add_flag("--private", o->is_private, "create the repo private when it does not exist");
    sub->callback([o] { run_push(*o); });
}

LOOM_COMMAND(setup_push);

}  // namespace

}  // namespace loom::cli
