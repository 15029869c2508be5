// Pipeline simulator: executes every rank's action list (pipeline_schedule.h)
// against each other with blocking communication and unit-time compute, to
// prove a schedule is executable before a model runs it.
//
// It checks, and reports the first violation as `error`:
//   - no deadlock: every rank reaches the end of its list;
//   - matching: on each (src rank, dst rank) channel the k-th send meets the
//     k-th receive (FIFO, NCCL's rule) and both name the same tensor (kind,
//     micro-batch, destination stage); nothing is left unreceived;
//   - data flow: a Forward at stage s > 0 has received its activation, a
//     Backward below the last stage its gradient, a Backward follows its own
//     Forward; every (micro-batch, chunk) is forwarded and backwarded exactly
//     once on every rank.
// and measures the time (makespan), per-rank busy time, the bubble share and
// the largest number of micro-batch chunks in flight per rank (activation
// memory).
//
// Communication models (compute-free, zero latency):
//   batched     consecutive communication actions are posted together and
//               complete when all are matched; a send is matched when its
//               receive is posted. What the runner does with group_start/end.
//   sequential  each action alone, and a send waits for its receive
//               (MPI_Ssend): the strictest; schedules that rely on batching
//               deadlock here (reported, not hung).
//   buffered    sends never wait (eager); receives wait for the send: pure data
//               dependencies, the lower bound on time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/pipeline_schedule.h"

namespace loom {

enum class CommModel : uint8_t { batched, sequential, buffered };

struct SimOptions {
    int64_t forward_time = 1;   // per micro-batch per chunk
    int64_t backward_time = 1;  // per micro-batch per chunk (2 for the usual 2x forward)
    // Per global stage (pp x chunks), replacing the two above where given:
    // stages of unequal work (the embeddings on the first, a head on the last).
    std::vector<int64_t> stage_forward_time, stage_backward_time;
    CommModel comm = CommModel::batched;
};

struct ComputeSpan {
    int64_t start = 0, end = 0;
};

struct SimResult {
    bool ok = false;
    std::string error;                // first violation, with ranks and actions
    int64_t makespan = 0;             // time the last rank finishes
    std::vector<int64_t> busy;        // (pp) compute time per rank
    double bubble = 0;                // idle share: 1 - sum(busy) / (pp * makespan)
    std::vector<int> max_in_flight;   // (pp) most chunks forwarded but not backwarded
    std::vector<std::vector<ComputeSpan>> spans;  // (pp) each rank's forwards and backwards
    int64_t messages = 0;             // matched send/receive pairs
};

SimResult simulate_pipeline(const std::vector<std::vector<Action>>& per_rank, int pp_size,
                            int n_micro, int n_virtual, const SimOptions& options = {});

// make_schedule for every rank, then simulate_pipeline.
SimResult simulate_schedule(ScheduleKind kind, int pp_size, int n_micro, int n_virtual,
                            const SimOptions& options = {});

}  // namespace loom
