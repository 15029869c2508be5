// What a pipeline's first and last stage compute besides their layer
// applications, estimated from the model's shape: the input to
// balanced_partition (parallel/pipeline_parallel.h), which knows no models.
#pragma once

#include <cstdint>

#include "models/model_config.h"
#include "parallel/pipeline_parallel.h"

namespace loom {

// The FLOP estimate behind StageExtras for a model, task and sequence length;
// masked LM scores only the labelled fraction of positions (mlm_probability).
StageExtras pipeline_stage_extras(const ModelConfig& c, int64_t seq_len, double mlm_probability);

}  // namespace loom
