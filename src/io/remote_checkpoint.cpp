// Checkpoint upload, listing, download and deletion on an ObjectStore
// (remote_checkpoint.h).
#include "io/remote_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/check.h"
#include "io/checkpoint.h"
#include "io/fetch_once.h"
#include "io/file_utils.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

// "checkpoint-12" -> 12; anything else -> -1.
int64_t step_of(const std::string& name) {
    constexpr std::string_view p = "checkpoint-";
    if (!name.starts_with(p) || name.size() == p.size()) return -1;
    int64_t v = 0;
    for (char c : name.substr(p.size())) {
        if (c < '0' || c > '9') return -1;
        v = v * 10 + (c - '0');
    }
    return v;
}

}  // namespace

std::vector<RemoteCheckpoint> list_remote_checkpoints(ObjectStore& store) {
    std::vector<RemoteCheckpoint> out;
    const std::string manifest(k_checkpoint_manifest);
    for (const auto& o : store.list("checkpoint-")) {
        const size_t slash = o.name.find('/');
        if (slash == std::string::npos || o.name.substr(slash + 1) != manifest) continue;
        const std::string name = o.name.substr(0, slash);
        const int64_t step = step_of(name);
        if (step >= 0) out.push_back({name, step});
    }
    std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.step < b.step; });
    return out;
}

void upload_checkpoint(const std::string& local_dir, ObjectStore& store) {
    const std::string name = fs::path(local_dir).filename().string();
    LOOM_CHECK(step_of(name) >= 0, "'{}': not a checkpoint-<step> folder", local_dir);
    const std::string manifest(k_checkpoint_manifest);
    LOOM_CHECK(fs::exists(fs::path(local_dir) / manifest),
               "'{}' has no {}: only complete checkpoints are uploaded", local_dir, manifest);
    // An older upload of this step must not look complete while its files change.
    store.remove(name + "/" + manifest);
    upload_folder(local_dir, store, name + "/", {manifest});
}

std::string download_checkpoint(ObjectStore& store, const RemoteCheckpoint& ckpt,
                                const std::string& output_dir) {
    const std::string prefix = ckpt.name + "/";
    const std::string manifest(k_checkpoint_manifest);
    ensure_dir(output_dir);
    const std::string final_dir = (fs::path(output_dir) / ckpt.name).string();
    FetchOnceOptions o;
    // The manifest is the last file of a checkpoint, here and when saved.
    o.is_complete = [&](const std::string& dir) { return fs::exists(fs::path(dir) / manifest); };
    try {
        // Ranks sharing this output_dir restore it once; the others wait.
        fetch_once(
            final_dir,
            [&](const std::string& tmp) {
                ensure_dir(tmp);
                for (const auto& obj : store.list(prefix)) {
                    const std::string rel = obj.name.substr(prefix.size());
                    if (rel.empty() || rel.ends_with('/')) continue;
                    const std::string p = (fs::path(tmp) / rel).string();
                    ensure_dir(parent_dir(p));
                    store.get_file(obj.name, p);
                }
                const int64_t step = verify_checkpoint(tmp);
                LOOM_CHECK(step == ckpt.step,
                           "its manifest records step {}, the folder name says {}", step,
                           ckpt.step);
            },
            o);
    } catch (const Error& e) {
        LOOM_FAIL("checkpoint {} could not be restored: {}", store.uri_of(ckpt.name), e.what());
    }
    return final_dir;
}

void delete_remote_checkpoint(ObjectStore& store, const std::string& name) {
    const std::string manifest = name + "/" + std::string(k_checkpoint_manifest);
    store.remove(manifest);
    for (const auto& o : store.list(name + "/")) store.remove(o.name);
}

}  // namespace loom
