// RemoteJob: a training run whose checkpoints and final model live in object
// storage, as SageMaker's checkpoint_s3_uri and model output do.
//
//   checkpoint_uri: s3://b/run    every checkpoint the trainer writes is
//                                 uploaded there (manifest last: complete or
//                                 absent, io/remote_checkpoint.h); rotation by
//                                 save_total_limit is mirrored. A job starting
//                                 without a newer complete local checkpoint
//                                 downloads the newest complete remote one, and
//                                 the trainer resumes from it when it is the
//                                 same job's, so a replacement machine
//                                 continues a spot-killed run.
//   output_dir: s3://b/run        the run works in a local staging folder and
//                                 uploads the final Hugging Face folder there
//                                 (checkpoints too, unless checkpoint_uri says
//                                 otherwise).
//
// Rank 0 uploads. Downloads happen on every rank that lacks the checkpoint
// locally (ranks on one host share it: rank 0 first, then the others find it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/job.h"
#include "io/object_store.h"

namespace loom {

class RemoteJob {
  public:
    // Rewrites an s3:// output_dir into a local staging folder (remembering
    // the URI for upload_final) and defaults checkpoint_uri to it.
    RemoteJob(Job& job, std::vector<std::string>& notes);

    bool mirrors_checkpoints() const { return ckpt_store_ != nullptr; }
    const std::string& checkpoint_uri() const;
    // Before a run that may resume: when the store holds a complete
    // checkpoint newer than every complete one in output_dir, downloads it.
    // With `step` >= 0, that step's checkpoint instead, unless output_dir
    // already has it complete (ranks after the main one fetch what it chose;
    // ranks on its host find its copy). Returns the downloaded folder's name,
    // or "".
    std::string fetch_for_resume(const std::string& output_dir, int64_t step = -1);
    // Starting over (overwrite_output_dir): deletes the store's checkpoints,
    // so no later restart resumes the old run from them. Returns how many.
    int64_t clear_checkpoints();
    // After a local checkpoint is committed (and rotated): upload it and
    // delete remote checkpoints the local rotation removed.
    void after_save(const std::string& local_checkpoint, const std::string& output_dir);
    // At the end: the final model folder to an s3:// output_dir.
    void upload_final(const std::string& output_dir);

  private:
    std::unique_ptr<ObjectStore> ckpt_store_;
    std::string final_uri_;  // "" unless output_dir was remote
};

}  // namespace loom
