// `loom plan --calibration FILE`: the file `--calibrate` wrote, read into the
// planner's machine (plan_calibrate.h).
#include <yaml-cpp/yaml.h>

#include <set>

#include "cli/calibrate_ranks.h"
#include "cli/plan_calibrate.h"
#include "core/check.h"

namespace loom::cli {

namespace {

YAML::Node load_calibration(const std::string& path) {
    try {
        return YAML::LoadFile(path);
    } catch (const YAML::BadFile&) {
        LOOM_FAIL("calibration file '{}' not found or unreadable", path);
    } catch (const YAML::Exception& e) {
        LOOM_FAIL("{}:{}: {}", path, e.mark.line + 1, e.msg);
    }
}

// The planner's machine from one file's figures; throws naming the file and
// key when one is missing or not a positive number.
MachineModel machine_from_node(const YAML::Node& n, const std::string& path) {
    auto num = [&](const char* key, bool positive) {
        const YAML::Node v = n[key];
        LOOM_CHECK(v.IsDefined(),
                   "{}: missing key '{}' (write the file with loom plan --calibrate)", path, key);
        double x = 0;
        try {
            x = v.as<double>();
        } catch (const YAML::Exception&) {
            LOOM_FAIL("{}:{}: {}: expected a number", path, v.Mark().line + 1, key);
        }
        LOOM_CHECK(positive ? x > 0 : x >= 0, "{}:{}: {}: expected a number {} 0, got {}", path,
                   v.Mark().line + 1, key, positive ? ">" : ">=", x);
        return x;
    };
    // A list of {group: N, <value>: x}, N ascending from 2 (absent: empty).
    auto by_group = [&](const char* key, const char* value, bool positive) {
        std::vector<std::pair<int, double>> out;
        const YAML::Node groups = n[key];
        if (!groups.IsDefined()) return out;
        LOOM_CHECK(groups.IsSequence(), "{}:{}: {}: expected a list", path, groups.Mark().line + 1,
                   key);
        for (const YAML::Node& g : groups) {
            int size = 0;
            double x = -1;
            try {
                size = g["group"].as<int>();
                x = g[value].as<double>();
            } catch (const YAML::Exception&) {
            }
            LOOM_CHECK(size >= 2 && (positive ? x > 0 : x >= 0) &&
                           (out.empty() || size > out.back().first),
                       "{}:{}: {}: expected {{group: N, {}: x}} with N of 2 or more, ascending, "
                       "and x {} 0",
                       path, g.Mark().line + 1, key, value, positive ? ">" : ">=");
            out.emplace_back(size, x);
        }
        return out;
    };
    MachineModel m;
    m.cores = int(num("cores", true));
    m.gflops_per_core = num("gflops_per_core", true);
    m.gemm_half_rows = num("gemm_half_rows", false);
    // Files written before the step measurement existed plan GEMMs only.
    if (n["step_efficiency"].IsDefined()) m.step_efficiency = num("step_efficiency", true);
    m.allreduce_gbps = num("allreduce_gbps", true);
    m.p2p_gbps = num("p2p_gbps", true);
    if (n["gemm_half_narrow"].IsDefined()) m.gemm_half_narrow = num("gemm_half_narrow", false);
    // Files written before it was measured add nothing for ranks sharing cores.
    if (n["shared_sync_s"].IsDefined()) {
        m.shared_sync_s = num("shared_sync_s", false);
        m.shared_sync_ranks = int(num("shared_sync_ranks", true));
        m.shared_sync_by_group = by_group("shared_sync_by_group", "s", false);
    }
    m.allreduce_gbps_by_group = by_group("allreduce_gbps_by_group", "gbps", true);
    // Files written before it was measured price ZeRO at the all-reduce's rate.
    if (n["zero_gbps_by_group"].IsDefined())
        m.zero_gbps_by_group = by_group("zero_gbps_by_group", "gbps", true);
    // Files written before it was measured price a tp collective as its
    // transfer plus shared_sync.
    if (const YAML::Node t = n["tp_collective_by_group"]; t.IsDefined()) {
        LOOM_CHECK(t.IsSequence(), "{}:{}: tp_collective_by_group: expected a list", path,
                   t.Mark().line + 1);
        for (const YAML::Node& e : t) {
            TpCollectiveCost c{0, -1, -1};
            try {
                c = {e["group"].as<int>(), e["bytes"].as<double>(), e["s"].as<double>()};
            } catch (const YAML::Exception&) {
            }
            const auto& all = m.tp_collective_by_group;
            const bool ascending = all.empty() || c.group > all.back().group ||
                                   (c.group == all.back().group && c.bytes > all.back().bytes);
            LOOM_CHECK(c.group >= 2 && c.bytes > 0 && c.s >= 0 && ascending,
                       "{}:{}: tp_collective_by_group: expected {{group: N, bytes: B, s: x}} "
                       "with N of 2 or more, B > 0, x >= 0, ascending by N then B",
                       path, e.Mark().line + 1);
            m.tp_collective_by_group.push_back(c);
        }
    }
    if (n["all_cores_share"].IsDefined()) m.all_cores_share = num("all_cores_share", true);
    // Files written before it was measured leave the optimizer step unpriced.
    if (n["adamw_params_per_s"].IsDefined()) m.adamw_params_per_s = num("adamw_params_per_s", true);
    return m;
}

// The figures a file holds (its top-level keys): files from different
// versions of --calibrate would mix a measured figure with another file's
// default.
std::set<std::string> figure_keys(const YAML::Node& n) {
    std::set<std::string> keys;
    for (const auto& kv : n) keys.insert(kv.first.as<std::string>());
    keys.erase("rounds");
    return keys;
}

bool same_groups(const std::vector<std::pair<int, double>>& a,
                 const std::vector<std::pair<int, double>>& b) {
    if (a.size() != b.size()) return false;
    for (size_t k = 0; k < a.size(); ++k)
        if (a[k].first != b[k].first) return false;
    return true;
}

}  // namespace

MachineModel machine_from_calibrations(const std::vector<std::string>& paths) {
    LOOM_CHECK(!paths.empty(), "--calibration: expected a file");
    std::vector<MachineModel> all;
    std::vector<std::set<std::string>> keys;
    for (const std::string& p : paths) {
        const YAML::Node n = load_calibration(p);
        all.push_back(machine_from_node(n, p));
        keys.push_back(figure_keys(n));
    }
    MachineModel m = all.front();
    if (all.size() == 1) return m;
    for (size_t i = 1; i < all.size(); ++i) {
        const MachineModel& o = all[i];
        bool same = o.cores == m.cores && o.shared_sync_ranks == m.shared_sync_ranks &&
                    keys[i] == keys.front() &&
                    same_groups(o.shared_sync_by_group, m.shared_sync_by_group) &&
                    same_groups(o.allreduce_gbps_by_group, m.allreduce_gbps_by_group) &&
                    same_groups(o.zero_gbps_by_group, m.zero_gbps_by_group) &&
                    o.tp_collective_by_group.size() == m.tp_collective_by_group.size();
        for (size_t k = 0; same && k < m.tp_collective_by_group.size(); ++k)
            same = o.tp_collective_by_group[k].group == m.tp_collective_by_group[k].group &&
                   o.tp_collective_by_group[k].bytes == m.tp_collective_by_group[k].bytes;
        LOOM_CHECK(same,
                   "--calibration {}: measured {} cores with {} ranks, or other figures, than "
                   "{} ({} cores, {} ranks); give files of one machine and world size, from one "
                   "version of loom plan --calibrate",
                   paths[i], o.cores, o.shared_sync_ranks, paths.front(), m.cores,
                   m.shared_sync_ranks);
    }
    // Each figure's median over the files, as --calibrate does over its
    // rounds: a shared host's rates move by more than a round's length.
    const auto med = [&](double MachineModel::*f) {
        return median_over(all, [&](const MachineModel& x) { return x.*f; });
    };
    for (double MachineModel::*f :
         {&MachineModel::gflops_per_core, &MachineModel::gemm_half_rows,
          &MachineModel::step_efficiency, &MachineModel::allreduce_gbps, &MachineModel::p2p_gbps,
          &MachineModel::shared_sync_s, &MachineModel::gemm_half_narrow,
          &MachineModel::adamw_params_per_s, &MachineModel::all_cores_share})
        m.*f = med(f);
    using Table = std::vector<std::pair<int, double>> MachineModel::*;
    for (Table t : {&MachineModel::shared_sync_by_group, &MachineModel::allreduce_gbps_by_group,
                    &MachineModel::zero_gbps_by_group})
        for (size_t k = 0; k < (m.*t).size(); ++k)
            (m.*t)[k].second =
                median_over(all, [&](const MachineModel& x) { return (x.*t)[k].second; });
    for (size_t k = 0; k < m.tp_collective_by_group.size(); ++k)
        m.tp_collective_by_group[k].s =
            median_over(all, [&](const MachineModel& x) { return x.tp_collective_by_group[k].s; });
    return m;
}

}  // namespace loom::cli
