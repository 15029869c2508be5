// Hub ids in `model:` and `--model`; see hub_model.h.
#include "cli/hub_model.h"

#include <filesystem>

#include "core/check.h"
#include "io/hf_hub.h"

namespace loom::cli {

namespace fs = std::filesystem;

void resolve_hub_model(Job& job) {
    ModelArgs& m = job.model;
    if (m.hub_id.empty()) return;
    const std::string snap = hub_resolve_model(m.hub_id, m.revision, HubSettings::from_environment());
    m.path = snap;
    if (m.config_path.empty()) m.config_path = (fs::path(snap) / "config.json").string();
    if (m.tokenizer_path.empty()) m.tokenizer_path = (fs::path(snap) / "tokenizer.json").string();
    if (m.weights_path.empty()) {
        const fs::path single = fs::path(snap) / "model.safetensors";
        m.weights_path = fs::exists(single)
                             ? single.string()
                             : (fs::path(snap) / "model.safetensors.index.json").string();
    }
}

std::string model_folder_or_hub(const std::string& arg, const std::string& revision) {
    if (fs::is_directory(arg)) {
        LOOM_CHECK(revision.empty(), "--revision {}: only applies to a Hub model id, and {} is a folder",
                   revision, arg);
        return arg;
    }
    LOOM_CHECK(!fs::exists(arg), "--model {}: not a folder", arg);
    LOOM_CHECK(hub_is_repo_id(arg),
               "--model {}: no such folder, and not a Hub model id (org/name)", arg);
    return hub_resolve_model(arg, revision, HubSettings::from_environment());
}

}  // namespace loom::cli
