// What `loom plan --calibrate`'s ranks measure together: all-reduce,
// ZeRO's reduce-scatter plus all-gather, and point-to-point bandwidth, and the wait a collective
// adds between compute segments when ranks share cores, for the whole world and in groups of each
// size (cli/plan_calibrate.cpp writes them for the planner).
#pragma once

#include <utility>
#include <vector>

#include "comm/comm.h"

namespace loom::cli {

struct RankFigures {
    double allreduce_gbps = 0, p2p_gbps = 0;
    double sync_s = 0;  // a collective's cost beyond its transfer, ranks at work between
    std::vector<std::pair<double, double>> sync_by_group;  // (group size, sync_s in such groups)
    std::vector<std::pair<double, double>> allreduce_by_group;  // (group size, GB/s)
    // ZeRO's pair, reduce-scatter then all-gather of the same buffer, as bus
    // bandwidth on the all-reduce's convention (the same bytes move).
    std::vector<std::pair<double, double>> zero_by_group;  // (group size, GB/s)
};

// Every rank of `c` calls this; rank 0's figures are the ones kept.
RankFigures measure_rank_figures(Communicator& c, bool quick);

}  // namespace loom::cli
