// Batch (io/batch.h, int64 tensors by key) -> ModelInputs for a given model,
// with every shape checked against what the task needs. Errors name the batch
// file, the key, and the expected and found shapes.
#pragma once

#include "io/batch.h"
#include "io/hf_config.h"
#include "models/model.h"

namespace loom {

// Label keys the task reads: {"labels"} or {"start_positions", "end_positions"}.
std::vector<std::string> label_keys(TaskKind task);

// Views into `batch` (which must outlive the inputs). With `require_labels`
// the task's label keys must be present (training, --backward).
ModelInputs inputs_from_batch(const Batch& batch, const ModelConfig& config, bool require_labels);

}  // namespace loom
