// Hub ids in `model:` and `--model`; see hub_model.h.
#include "cli/hub_model.h"

#include <filesystem>

#include "core/check.h"
#include "io/hf_hub.h"
#include "io/safetensors.h"

namespace loom::cli {

namespace fs = std::filesystem;

void resolve_hub_model(Job& job) {
    ModelArgs& m = job.model;
    if (m.hub_id.empty()) return;
    if (fs::is_directory(m.path)) {  // a folder after all
        LOOM_CHECK(m.revision.empty(), "model.revision: {} is a folder, not a Hub model id", m.path);
        m.hub_id.clear();
        return;
    }
    std::string snap;
    try {
        snap = hub_resolve_model(m.hub_id, m.revision, HubSettings::from_environment());
    } catch (const Error& e) {
        LOOM_FAIL("{}: model '{}' is no folder here ({}), so it was taken as a Hub model id: {}",
                  job.source, m.hub_id, m.path, e.what());
    }
    // Files named one by one stay; those the folder supplied come from the snapshot.
    const fs::path folder = m.path;
    auto from_folder = [&](const std::string& p, const char* name) {
        return p.empty() || fs::path(p) == folder / name;
    };
    if (from_folder(m.config_path, "config.json"))
        m.config_path = (fs::path(snap) / "config.json").string();
    if (from_folder(m.tokenizer_path, "tokenizer.json"))
        m.tokenizer_path = (fs::path(snap) / "tokenizer.json").string();
    if (from_folder(m.weights_path, "model.safetensors")) {
        m.weights_path = safetensors_weights_in(snap);
    }
    m.path = snap;
}

std::string model_folder_or_hub(const std::string& arg, const std::string& revision) {
    if (fs::is_directory(arg)) {
        LOOM_CHECK(revision.empty(), "--revision {}: only applies to a Hub model id, and {} is a folder",
                   revision, arg);
        return arg;
    }
    // Not an id either: the caller's own error names the file it misses.
    if (fs::exists(arg) || !hub_is_repo_id(arg)) return arg;
    try {
        return hub_resolve_model(arg, revision, HubSettings::from_environment());
    } catch (const Error& e) {
        LOOM_FAIL("--model {}: no such folder here, so it was taken as a Hub model id: {}", arg,
                  e.what());
    }
}

}  // namespace loom::cli
