// Hub ids in `model:` and `--model`; see hub_model.h.
#include "cli/hub_model.h"

#include <filesystem>

#include "core/check.h"
#include "io/hf_hub.h"
#include "io/safetensors.h"
#include "models/model_config.h"
#include "parallel/layout_plan.h"
#include "train/plan_model.h"

namespace loom::cli {

namespace fs = std::filesystem;

namespace {

// A downloaded config.json is untrusted: sizes that describe far more
// parameters than the downloaded weights hold would make the model builder
// allocate for them before any shape is compared. Allowed beyond the
// weights (at 2 bytes per element, the smallest dtype): the task heads a
// fine-tuning adds (a pooler / transform and classifier, an LM bias).
void check_config_fits_weights(const std::string& config_path, const std::string& weights_path) {
    if (weights_path.empty() || !fs::exists(weights_path)) return;
    const ModelConfig c = load_hf_config(config_path);
    const double params = double(plan_model_from_config(c).total_params);
    const double C = double(c.hidden_size);
    const double held = double(SafetensorsFile::open(weights_path).data_bytes()) / 2;
    const double heads = 2 * C * C + C * double(c.num_labels + 8) + double(c.vocab_size) + double(1 << 20);
    LOOM_CHECK(params <= held + heads,
               "{}: the config describes {:.0f} parameters, but the weights {} hold at most {:.0f}; "
               "refusing to allocate for sizes the weights do not match",
               config_path, params, weights_path, held);
}

}  // namespace

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
    check_config_fits_weights(m.config_path, m.weights_path);
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
        const std::string snap = hub_resolve_model(arg, revision, HubSettings::from_environment());
        check_config_fits_weights((fs::path(snap) / "config.json").string(), safetensors_weights_in(snap));
        return snap;
    } catch (const Error& e) {
        LOOM_FAIL("--model {}: no such folder here, so it was taken as a Hub model id: {}", arg,
                  e.what());
    }
}

}  // namespace loom::cli
