// Training checkpoints: atomic, verifiable folders under output_dir.
//
// Layout of output_dir/checkpoint-<step>/ (what the trainer puts in it):
//   model.safetensors      parameters by HF name (tied aliases once), float32
//   optimizer.safetensors  optimizer state by name (torch's exp_avg.<name>, ...)
//   scheduler.json         learning-rate schedule position
//   trainer_state.json     step, epoch, data position, seeds, best metric, log history
//   job.yaml, job_identity.json   the job that wrote it (train/job_identity.h)
//   config.json, tokenizer.json, ...   so a checkpoint is itself an HF model folder
//   loom_checkpoint.json   written last: {"format": "loom-checkpoint", "version": 1,
//                          "step": N, "files": {name: {"bytes": n, "hash": "<16 hex>"}}}
//
// Invariant: a folder named checkpoint-<step> is complete. Files are written
// into output_dir/.tmp-checkpoint-<step>/, hashed, the manifest is written,
// the folder is fsynced and then renamed into place. A crash leaves only a
// .tmp-* folder, which the next writer removes. Folders that arrive by other
// means (a copy, a sync, a store without atomic renames) may still be
// unfinished: checkpoint_incomplete_reason() says so from the manifest and the
// file sizes, and resuming passes over them to the previous complete one.
// verify_checkpoint() re-hashes every file, so bit rot in the checkpoint a
// run resumes from is an error naming the file, never a silent fresh start.
//
// Not here: what the files mean (train/train_state.h, the trainer); this layer
// moves bytes and tensors.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace loom {

inline constexpr std::string_view k_checkpoint_manifest = "loom_checkpoint.json";
inline constexpr int k_checkpoint_version = 1;

// Builds one checkpoint folder; nothing is visible under its final name until commit().
class CheckpointWriter {
  public:
    CheckpointWriter(std::string output_dir, int64_t step);
    ~CheckpointWriter();  // removes the temporary folder unless committed
    CheckpointWriter(const CheckpointWriter&) = delete;
    CheckpointWriter& operator=(const CheckpointWriter&) = delete;

    void add_tensors(const std::string& file, const std::map<std::string, Tensor>& tensors,
                     const std::map<std::string, std::string>& metadata = {});
    void add_text(const std::string& file, std::string_view text);
    // Copies an existing file (a tokenizer.json) into the checkpoint.
    void add_copy(const std::string& file, const std::string& source_path);
    // Writes the manifest and renames the folder to output_dir/checkpoint-<step>
    // (replacing an older folder of that name). Returns the final path.
    std::string commit();

    const std::string& tmp_path() const { return tmp_dir_; }

  private:
    std::string output_dir_, tmp_dir_, final_dir_;
    int64_t step_;
    std::vector<std::string> files_;
    bool committed_ = false;
};

struct CheckpointInfo {
    std::string path;
    int64_t step = 0;
};

// Complete checkpoint-<step> folders (a manifest present), ascending by step.
std::vector<CheckpointInfo> list_checkpoints(const std::string& output_dir);

// Why the checkpoint folder `dir` is incomplete, or "" when it is not: its
// manifest is missing or unreadable, or a file the manifest lists is missing
// or has another size. Loom's own writer cannot leave such a folder under a
// checkpoint-<step> name (it renames a finished folder into place), but a
// copy, a sync or a store without atomic renames can. Content hashes are
// verify_checkpoint's: a file of the right size with other bytes is damage,
// not an unfinished write.
std::string checkpoint_incomplete_reason(const std::string& dir);

// The newest checkpoint-<step> folder in output_dir that is complete, or
// nullopt. Newer folders passed over are added to `skipped` as
// "checkpoint-<step>: <why>".
std::optional<CheckpointInfo> newest_complete_checkpoint(const std::string& output_dir,
                                                         std::vector<std::string>* skipped);

// Removes every checkpoint folder of output_dir, complete or not
// (checkpoint-<step>, the .tmp-checkpoint-<step> of an interrupted writer and
// the checkpoint-<step>.old of an interrupted replacement). Returns how many.
int64_t remove_checkpoints(const std::string& output_dir);

// Checks the manifest (format, version) and every file's size and hash;
// returns the step it records. Errors name the folder and the file.
int64_t verify_checkpoint(const std::string& dir);

// Deletes the oldest checkpoints beyond `limit` (0 = keep all), never the one
// at `best_path`, as HF's _rotate_checkpoints: the best is treated as the
// second newest, so with limit 1 both the best and the newest stay.
// Returns the deleted paths.
std::vector<std::string> rotate_checkpoints(const std::string& output_dir, int64_t limit,
                                            const std::string& best_path);

// 64-bit content hash of a file (fast multiply-xor over 8-byte words); what
// the manifest stores, as 16 hex digits.
std::string file_hash_hex(const std::string& path);

}  // namespace loom
