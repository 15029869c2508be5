// A model's shape facts for the cost model (parallel/layout_plan.h), read
// from its ModelConfig: here, above both, because the planner in parallel/
// does not see models/.
#pragma once

#include "models/model_config.h"
#include "parallel/layout_plan.h"

namespace loom {

PlanModel plan_model_from_config(const ModelConfig& config);

}  // namespace loom
