// `loom plan --calibrate`: measures this machine for the CPU planner (GEMM
// rate by shape and by threads, the share of it a training step achieves,
// all-reduce and point-to-point bandwidth between ranks) and writes the
// figures as YAML; `loom plan --calibration FILE...` reads them into the
// MachineModel (parallel/layout_plan.h).
//
// Ranks are threads of this process (comm/comm_local.h), so the
// bandwidths are those of in-process copies, an upper bound for MPI's
// shared-memory transport; the file says so. Measurements on a busy machine
// are low: the load average at the start is recorded beside them.
#pragma once

#include <string>
#include <vector>

#include "parallel/layout_plan.h"

namespace loom::cli {

struct CalibrateOptions {
    std::string out;  // YAML file to write ("" = stdout only)
    int ranks = 2;    // ranks for the bandwidth measurements
    bool quick = false;  // small shapes and short timings (tests)
    int rounds = 3;      // whole measurements; each figure is their median
};

void run_calibrate(const CalibrateOptions& o);

// The planner's machine from calibration files; throws naming the file and
// key when one is missing or not a positive number. Several files of one
// machine and world size give each figure's median: a shared host's rates
// move over an hour by more than within one calibration, so calibrations
// before and after a long run bracket it. Throws naming the file whose
// cores, ranks or figures differ from the first's.
MachineModel machine_from_calibrations(const std::vector<std::string>& paths);

}  // namespace loom::cli
