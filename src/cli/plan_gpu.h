// `loom plan --machine NAME`: the cluster planner's command-line side
// (parallel/gpu_plan.h): price one --layout or search them all, print a
// table, one JSON object per layout (--json) or why the winner wins
// (--explain). The CPU planner of cmd_plan.cpp is untouched by this path.
#pragma once

#include <string>

#include "parallel/gpu_plan.h"

namespace loom::cli {

struct GpuPlanOptions {
    std::string machine;  // built-in name or YAML file
    int nodes = 1;
    std::string layout;   // "dp=..,tp=.."; empty = search
    int64_t global_batch = 0;  // 0 = the job's
    bool json = false;
    bool explain = false;
    bool all = false;
    int top = 0;
    GpuSearchBounds bounds;
};

// The job's model (config only), sequence length, global batch and
// distribution defaults (zero_stage, recompute, precision), then the plan.
void run_gpu_plan(const std::string& job_path, const std::vector<std::string>& overrides,
                  const GpuPlanOptions& o);

}  // namespace loom::cli
