// RemoteJob: checkpoint_uri mirroring and s3:// output folders.
#include "train/remote_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "core/check.h"
#include "io/checkpoint.h"
#include "io/remote_checkpoint.h"
#include "io/uri.h"
#include "train/replica_sync_comm.h"

namespace loom {

namespace fs = std::filesystem;

RemoteJob::RemoteJob(Job& job, std::vector<std::string>& notes) {
    std::string& out = job.training.output_dir;
    if (is_remote_uri(out)) {
        LOOM_CHECK(parse_uri(out).scheme == UriScheme::s3,
                   "hyperparameters.output_dir: {} is not writable storage; use a local folder or "
                   "an s3:// URI",
                   out);
        final_uri_ = out;
        if (job.checkpoint.checkpoint_uri.empty()) job.checkpoint.checkpoint_uri = out;
        out = (fs::path(remote_cache_dir()) / "runs" /
               fmt::format("{:016x}", fingerprint64(final_uri_)))
                  .string();
        job.checkpoint.output_dir = out;
        // Paths defaulted under the remote output_dir move with it.
        std::string& logs = job.training.logging_dir;
        if (logs.starts_with(final_uri_)) logs = out + logs.substr(final_uri_.size());
        notes.push_back(
            fmt::format("output_dir {}: working in {}, the final model is uploaded at "
                        "the end",
                        final_uri_, out));
    }
    if (!job.checkpoint.checkpoint_uri.empty())
        ckpt_store_ = open_object_store(job.checkpoint.checkpoint_uri);
}

const std::string& RemoteJob::checkpoint_uri() const {
    static const std::string none;
    return ckpt_store_ ? ckpt_store_->uri() : none;
}

std::string RemoteJob::fetch_for_resume(const std::string& output_dir, int64_t step) {
    if (!ckpt_store_) return "";
    if (step >= 0) {
        const std::string local =
            (fs::path(output_dir) / fmt::format("checkpoint-{}", step)).string();
        if (fs::is_directory(local) && checkpoint_incomplete_reason(local).empty()) return "";
    }
    const auto remote = list_remote_checkpoints(*ckpt_store_);
    const RemoteCheckpoint* want = nullptr;
    if (step >= 0) {
        for (const auto& r : remote)
            if (r.step == step) want = &r;
    } else if (!remote.empty()) {
        const auto local = newest_complete_checkpoint(output_dir, nullptr);
        if (!local || local->step < remote.back().step) want = &remote.back();
    }
    if (!want) return "";
    download_checkpoint(*ckpt_store_, *want, output_dir);
    return want->name;
}

int64_t RemoteJob::clear_checkpoints() {
    if (!ckpt_store_) return 0;
    const auto remote = list_remote_checkpoints(*ckpt_store_);
    for (const auto& r : remote) delete_remote_checkpoint(*ckpt_store_, r.name);
    return int64_t(remote.size());
}

void RemoteJob::after_save(const std::string& local_checkpoint, const std::string& output_dir) {
    if (!ckpt_store_ || local_checkpoint.empty()) return;
    upload_checkpoint(local_checkpoint, *ckpt_store_);
    // Mirror the local rotation: what is gone locally goes remotely too.
    const auto local = list_checkpoints(output_dir);
    for (const auto& r : list_remote_checkpoints(*ckpt_store_)) {
        const bool kept = std::any_of(local.begin(), local.end(), [&](const CheckpointInfo& c) {
            return fs::path(c.path).filename() == r.name;
        });
        if (!kept) delete_remote_checkpoint(*ckpt_store_, r.name);
    }
}

void RemoteJob::upload_final(const std::string& output_dir) {
    if (final_uri_.empty()) return;
    auto store = open_object_store(final_uri_);
    // Checkpoints are mirrored as they are written (and may live elsewhere).
    upload_folder(output_dir, *store, "", {"model.safetensors"}, {"checkpoint-"});
}

}  // namespace loom
