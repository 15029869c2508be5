// `distribution: auto`: before the ranks are grouped, the layout planner
// picks the fastest feasible data x tensor x pipeline layout (with its
// micro-batches, schedule and checkpointing) for the job, the world size and
// the machine, and the job's distribution block is rewritten to it.
//
// The global batch is held at per_device_train_batch_size x
// gradient_accumulation_steps x world size (what plain data parallelism on
// this world would train with); the chosen layout only splits it.
// The machine is distribution.machine (a GPU profile, parallel/gpu_profile.h)
// or, when empty, this host's CPU as the CPU planner models it
// (parallel/layout_plan.h). Nothing is measured here.
#pragma once

#include <string>
#include <vector>

#include "config/job.h"

namespace loom {

// Rewrites job.distribution (degrees, microbatches, pipeline, virtual_stages,
// activation_checkpointing) and the batch split in job.training when
// distribution.auto is set; returns the lines to print (choice, runner-up,
// why), empty when auto is off. Throws when no layout is feasible, naming
// the reason of the closest one.
std::vector<std::string> apply_auto_layout(Job& job, int world_size, int ranks_on_host);

}  // namespace loom
