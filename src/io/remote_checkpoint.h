// Checkpoints mirrored to a checkpoint_uri (s3://bucket/prefix or a local
// folder), like SageMaker's checkpoint_s3_uri.
//
// Remote layout: <uri>/checkpoint-<step>/<every file of the local folder>,
// the manifest loom_checkpoint.json (checkpoint.h) uploaded LAST.
//
// Invariant (complete-or-absent): a remote checkpoint counts only when its
// manifest is there, and the manifest is written after every other file has
// been uploaded. An upload that stops half way (a crash, the store going
// down) leaves files without a manifest, which list_remote_checkpoints
// ignores, so the previous complete checkpoint stays the newest. Re-uploading
// a step removes its old manifest first; deleting removes the manifest first.
// A download is verified against the manifest's sizes and hashes before it is
// renamed into place, so a truncated or damaged object is an error naming the
// remote file, never a silent fresh start.
//
// Not here: when to upload or resume (train/remote_job.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/object_store.h"

namespace loom {

struct RemoteCheckpoint {
    std::string name;  // "checkpoint-<step>"
    int64_t step = 0;
};

// Complete checkpoints (manifest present) in the store, ascending by step.
std::vector<RemoteCheckpoint> list_remote_checkpoints(ObjectStore& store);

// Uploads the local checkpoint folder local_dir (named checkpoint-<step>),
// manifest last.
void upload_checkpoint(const std::string& local_dir, ObjectStore& store);

// Downloads `ckpt` into output_dir/<name> (through output_dir/<name>.part),
// verifies it and returns its local path. Processes sharing output_dir
// download it once (fetch_once.h): a folder of that name with a manifest is
// kept as it is (another rank restored it); one without is replaced.
std::string download_checkpoint(ObjectStore& store, const RemoteCheckpoint& ckpt,
                                const std::string& output_dir);

// Removes a remote checkpoint, manifest first.
void delete_remote_checkpoint(ObjectStore& store, const std::string& name);

}  // namespace loom
