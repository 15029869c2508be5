// plan_layouts: every layout of the world, priced and ranked
// (layout_plan.h); and the machine's figures measured by group size.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "parallel/layout_plan.h"

namespace loom {

namespace {

// A figure measured by group size: as measured at a size, linear in log2
// between measured sizes, the nearest end beyond them; `fallback` where
// none was measured.
double by_group_size(const std::vector<std::pair<int, double>>& t, int group, double fallback) {
    if (t.empty()) return fallback;
    if (group <= t.front().first) return t.front().second;
    if (group >= t.back().first) return t.back().second;
    // Between two measured sizes: linear in log2 of the group size.
    size_t i = 1;
    while (t[i].first < group) ++i;
    const double x0 = std::log2(double(t[i - 1].first)), x1 = std::log2(double(t[i].first));
    const double f = (std::log2(double(group)) - x0) / (x1 - x0);
    return t[i - 1].second + f * (t[i].second - t[i - 1].second);
}

}  // namespace

double shared_sync_for(const MachineModel& mc, int group) {
    return by_group_size(mc.shared_sync_by_group, group, mc.shared_sync_s);
}

double allreduce_gbps_for(const MachineModel& mc, int group) {
    return by_group_size(mc.allreduce_gbps_by_group, group, mc.allreduce_gbps);
}

double zero_gbps_for(const MachineModel& mc, int group) {
    if (mc.zero_gbps_by_group.empty()) return allreduce_gbps_for(mc, group);
    return by_group_size(mc.zero_gbps_by_group, group, mc.allreduce_gbps);
}

double tp_collective_s(const MachineModel& mc, int group, double bytes) {
    // Each measured group's cost at `bytes`, then by group size as above.
    std::vector<std::pair<int, double>> at_bytes;
    const auto& t = mc.tp_collective_by_group;
    for (size_t i = 0; i < t.size();) {
        size_t end = i;
        while (end < t.size() && t[end].group == t[i].group) ++end;
        double s = t[i].s;
        if (end - i == 1) {
            s = t[i].s * bytes / t[i].bytes;
        } else {
            size_t k = i + 1;  // the segment [k - 1, k] that holds bytes, or the nearest one
            while (k + 1 < end && t[k].bytes < bytes) ++k;
            const TpCollectiveCost &a = t[k - 1], &b = t[k];
            s = a.s + (bytes - a.bytes) * (b.s - a.s) / (b.bytes - a.bytes);
        }
        at_bytes.emplace_back(t[i].group, std::max(0.0, s));
        i = end;
    }
    return by_group_size(at_bytes, group, -1.0);
}

std::vector<PlanRow> plan_layouts(const PlanModel& m, const PlanRequest& q,
                                  const MachineModel& mc) {
    std::vector<PlanRow> rows;
    const int world = q.world;
    for (int tp = 1; tp <= world; ++tp) {
        if (world % tp) continue;
        for (int pp = 1; pp <= world / tp; ++pp) {
            if ((world / tp) % pp) continue;
            const int dp = world / tp / pp;
            std::vector<ScheduleKind> kinds{ScheduleKind::one_f_one_b};
            if (pp > 1)
                kinds = {ScheduleKind::simple, ScheduleKind::one_f_one_b,
                         ScheduleKind::interleaved};
            for (ScheduleKind k : kinds) {
                for (bool ckpt : {false, true}) {
                    PlanRow r;
                    r.layout = {dp,   tp,
                                pp,   dp > 1 ? q.zero_stage : 0,
                                k,    k == ScheduleKind::interleaved ? 2 : 1,
                                ckpt, 1};
                    r.workload = split_workload(q.global_batch, q.seq, q.microbatches, dp);
                    r.why_not = layout_check(m, r.workload, r.layout);
                    r.feasible = r.why_not.empty();
                    if (r.feasible) {
                        r.memory = plan_memory(m, r.workload, r.layout);
                        r.time = plan_time(m, r.workload, r.layout, mc, world);
                        if (mc.memory_gib > 0 && r.memory.peak > mc.memory_gib * double(1 << 30)) {
                            r.feasible = false;
                            r.why_not = "predicted peak over the memory limit";
                        }
                    }
                    rows.push_back(r);
                }
            }
        }
    }
    std::stable_sort(rows.begin(), rows.end(), [](const PlanRow& a, const PlanRow& b) {
        if (a.feasible != b.feasible) return a.feasible;
        return a.time.step_s < b.time.step_s;
    });
    return rows;
}

}  // namespace loom
