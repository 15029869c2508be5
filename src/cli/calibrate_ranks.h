// What `loom plan --calibrate`'s ranks measure together: all-reduce,
// ZeRO's reduce-scatter plus all-gather, and point-to-point bandwidth, and the wait a collective
// adds between compute segments when ranks share cores, for the whole world and in groups of each
// size (cli/plan_calibrate.cpp writes them for the planner).
#pragma once

#include <utility>
#include <vector>

#include "comm/comm.h"
#include "parallel/layout_plan.h"

namespace YAML {
class Emitter;
}

namespace loom::cli {

struct RankFigures {
    double allreduce_gbps = 0, p2p_gbps = 0;
    double sync_s = 0;  // a collective's cost beyond its transfer, ranks at work between
    std::vector<std::pair<double, double>> sync_by_group;  // (group size, sync_s in such groups)
    std::vector<std::pair<double, double>> allreduce_by_group;  // (group size, GB/s)
    // ZeRO's pair, reduce-scatter then all-gather of the same buffer, as bus
    // bandwidth on the all-reduce's convention (the same bytes move).
    std::vector<std::pair<double, double>> zero_by_group;  // (group size, GB/s)
    // A tp all-reduce's whole cost between compute segments, by group and
    // buffer size (every group size measured, the world's last).
    std::vector<TpCollectiveCost> tp_collective;
};

// Every rank of `c` calls this; rank 0's figures are the ones kept.
RankFigures measure_rank_figures(Communicator& c, bool quick);

// The middle value; the mean of the two middle ones for an even count.
double median(std::vector<double> v);
// The median of one figure over calibration rounds: `get(round)`.
template <typename Round, typename Get>
double median_over(const std::vector<Round>& rounds, const Get& get) {
    std::vector<double> v;
    for (const Round& r : rounds) v.push_back(get(r));
    return median(std::move(v));
}
// Each (x, figure) table's figures replaced by their medians over the rounds.
template <typename Round>
void median_table(Round& m, const std::vector<Round>& rounds,
                  std::vector<std::pair<double, double>> Round::*t) {
    for (size_t i = 0; i < (m.*t).size(); ++i)
        (m.*t)[i].second = median_over(rounds, [&](const Round& r) { return (r.*t)[i].second; });
}
// Each figure's median over calibration rounds (every round's tables have
// the same shape).
RankFigures median_rank_figures(const std::vector<RankFigures>& rounds);
// The calibration file's tables by group size (the planner's MachineModel
// fields of the same names).
void emit_rank_tables(YAML::Emitter& y, const RankFigures& f);

}  // namespace loom::cli
