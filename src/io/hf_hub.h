// The Hugging Face Hub: model ids resolved through the shared cache, and
// folders pushed as commits, over the Hub's HTTP API (as huggingface_hub and
// @huggingface/hub speak it).
//
// Cache layout (shared with transformers / huggingface_hub):
//   <cache>/models--<org>--<name>/blobs/<etag>          file contents
//   <cache>/models--<org>--<name>/refs/<revision>       the commit a branch/tag names
//   <cache>/models--<org>--<name>/snapshots/<commit>/<file> -> ../../blobs/<etag>
// <cache> = HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
// else ~/.cache/huggingface/hub.
//
// Invariants:
//   - A snapshot file only appears once its blob is complete and verified
//     (size; SHA-256 when the ETag is one, as for every LFS file).
//   - Names from the server or a repo's index.json never leave the snapshot
//     folder (hub_check_relative_path), and a cached snapshot whose files
//     resolve outside the cache is refused.
//   - HF_HUB_OFFLINE=1 makes no network call at all.
//   - Tokens are never printed; errors name where the token came from.
//
// Not here: which files a training job needs beyond the model files, or the
// trainer's scheduling of pushes (train/hub_push*).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace loom {

struct HubSettings {
    std::string endpoint = "https://huggingface.co";  // HF_ENDPOINT, no trailing '/'
    std::string cache_dir;                             // see the header comment
    bool offline = false;                              // HF_HUB_OFFLINE
    std::string token;                                 // empty: anonymous
    std::string token_source;  // "HF_TOKEN", "the token file /x/token", "hub_token"
    bool progress = true;      // progress lines on stderr (HF_HUB_DISABLE_PROGRESS_BARS)
    // From the environment; `token` given (a job's hub_token) wins over HF_TOKEN
    // and the token file.
    static HubSettings from_environment(const std::string& token = "",
                                        const std::string& token_source = "hub_token");
};

// "name" or "org/name" in the Hub's alphabet (letters, digits, '-', '_', '.'),
// at most 96 characters, no "--" or ".." and no leading/trailing '-' or '.'.
bool hub_is_repo_id(const std::string& s);
// Throws naming `what` unless `path` is a relative path whose every part is a
// plain name (no "", ".", "..", no backslash, no absolute path, no NUL).
void hub_check_relative_path(const std::string& path, const std::string& what);
// "<cache>/models--org--name".
std::string hub_repo_cache_dir(const HubSettings& s, const std::string& repo_id);

// The snapshot folder holding config.json, the tokenizer files and the
// weights (model.safetensors or the shards of model.safetensors.index.json)
// of repo_id at revision (branch, tag or commit; empty = "main"). Downloads
// what is missing, once per machine when several processes ask at once.
// Throws with a message that names the repo, the file and the reason (a repo
// with only pytorch_model.bin, 401/403/404, offline and not cached).
std::string hub_resolve_model(const std::string& repo_id, const std::string& revision,
                              const HubSettings& s);

// ---- uploads ----

struct HubUploadFile {
    std::string path_in_repo;
    std::string local_path;
};

struct HubCommitResult {
    std::string commit;  // the new commit's id
    std::string url;
};

// Creates the repo when it does not exist (409 = already there is fine).
void hub_create_repo(const std::string& repo_id, bool is_private, const HubSettings& s);

// One commit with these files on `branch`: preupload decides regular vs LFS,
// LFS content goes through the batch API (basic or multipart), then the
// NDJSON commit. Throws on failure naming the step, the file and the status.
HubCommitResult hub_commit_files(const std::string& repo_id, const std::vector<HubUploadFile>& files,
                                 const std::string& title, const HubSettings& s,
                                 const std::string& branch = "main");

// Every regular file under `folder` (recursively), with `/`-separated paths,
// in name order; `skip(relative)` true leaves a file (or folder) out.
std::vector<HubUploadFile> hub_folder_files(
    const std::string& folder, const std::function<bool(const std::string&)>& skip = {});

}  // namespace loom
