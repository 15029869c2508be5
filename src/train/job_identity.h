// Job identity: the settings that make two runs the same run, written into
// every checkpoint (job_identity.json) so that a restarted job continues only
// its own checkpoints and refuses another job's, naming what differs.
//
// Built from job_to_yaml, so a key added to the job counts by default. Left
// out, because changing them does not make another run:
//   - where results go: output_dir, logging_dir, checkpoint_uri,
//     overwrite_output_dir, resume_from_checkpoint;
//   - how the steps are computed: the whole distribution block (checkpoints
//     are layout-free), use_cpu, bf16 / fp16, per_device_eval_batch_size;
//   - how often it logs, evaluates and saves, and disable_tqdm;
//   - how long it runs: num_train_epochs and max_steps, so a finished or
//     interrupted run can be extended (Hugging Face allows it too; the
//     learning-rate schedule then follows the new length).
// per_device_train_batch_size is replaced by the global batch it makes
// (global_train_batch_size = per device x gradient_accumulation_steps x
// data-parallel ranks), so 8 per device on 1 rank continues as 4 per device
// on 2. gradient_accumulation_steps itself stays: the data position in a
// checkpoint counts micro-batches of per device x ranks rows, which another
// accumulation would change.
//
// Format: {"format": "loom-job-identity", "version": 1,
//          "fields": {"task": "...", "hyperparameters.learning_rate": "0.01", ...}}
// Values are the dumped YAML text (numbers in their shortest form, paths
// absolute), so equal settings compare equal however they were written.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "config/job.h"

namespace loom {

inline constexpr std::string_view k_job_identity_file = "job_identity.json";

nlohmann::json job_identity(const Job& job, int64_t data_parallel_size);

// "key: <saved> (checkpoint) vs <current> (this job)" for each field whose
// values differ. A key only one side has is not a difference: a newer Loom
// knows more keys, and their defaults keep the old run's behaviour.
// Throws when `saved` is not an identity (names `source`).
std::vector<std::string> job_identity_differences(const nlohmann::json& saved,
                                                  const nlohmann::json& current,
                                                  const std::string& source);

}  // namespace loom
