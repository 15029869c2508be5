// The ranks' measurements of `loom plan --calibrate` (calibrate_ranks.h).
#include "cli/calibrate_ranks.h"

#include <fmt/format.h>
#include <omp.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <span>
#include <tuple>
#include <vector>

#include "ops/gemm.h"

namespace loom::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Bus bandwidth of `run` (an all-reduce's bytes moved: 2 (n-1)/n x `bytes`
// per rank per second, the planner's ring convention), after one warm-up
// call. Best of 3 rounds of at least min_s each: with more ranks than cores
// one round's figure moves 4x with what the kernel runs when. Every rank of
// `c` calls this.
template <typename Run>
double best_bus_gbps(Communicator& c, double bytes, double min_s, Run run) {
    const int ranks = c.size();
    run();  // warm
    double best = 0;
    for (int round = 0; round < 3; ++round) {
        c.barrier()->wait();
        int reps = 0;
        const auto t0 = Clock::now();
        double dt = 0;
        while (true) {
            run();
            ++reps;
            dt = seconds_since(t0);
            // Every rank must run the same number of collectives: rank 0 decides.
            float more = dt < min_s ? 1.f : 0.f;
            c.broadcast(std::span<float>(&more, 1), 0)->wait();
            if (more == 0.f) break;
        }
        best = std::max(best, 2.0 * (ranks - 1) / ranks * bytes * reps / dt / 1e9);
    }
    c.barrier()->wait();
    return best;
}

// Bus bandwidth of an all-reduce (2 (n-1)/n bytes per rank per second, the
// planner's ring convention) and of one send/recv between ranks 0 and 1, as
// rank 0 sees them; every rank of `c` calls this.
std::pair<double, double> measure_bandwidths(Communicator& c, int64_t floats, double min_s) {
    double p2p = 0;
    std::vector<float> buf(size_t(floats), 1.f);
    const double bytes = 4.0 * double(floats);
    const double ar = best_bus_gbps(
        c, bytes, min_s, [&] { c.all_reduce(std::span<float>(buf), ReduceOp::sum)->wait(); });
    if (c.rank() <= 1) {
        const auto t1 = Clock::now();
        constexpr int k_msgs = 8;
        for (int i = 0; i < k_msgs; ++i) {
            if (c.rank() == 0) {
                c.send(buf.data(), floats, DType::f32, 1)->wait();
            } else {
                c.recv(buf.data(), floats, DType::f32, 0)->wait();
            }
        }
        // The receiver's clock ends last; send its figure to rank 0.
        float seen = float(bytes * k_msgs / seconds_since(t1) / 1e9);
        if (c.rank() == 1) c.send(&seen, 1, DType::f32, 0, 1)->wait();
        if (c.rank() == 0) c.recv(&seen, 1, DType::f32, 1, 1)->wait();
        p2p = seen;
    }
    c.barrier()->wait();
    return {ar, p2p};
}

// A tensor-parallel step's pattern: every rank computes a segment, then all
// of them all-reduce. Timed without the all-reduces and with them, at each
// of `floats` per buffer, fastest of 3 runs each; per size, what one
// collective adds to the segments' time, transfer and waits together.
std::vector<double> collective_costs(Communicator& c, const std::vector<int64_t>& floats,
                                     bool quick) {
    omp_set_num_threads(1);
    const int64_t rows = 128, n = quick ? 256 : 1024;
    const int segments = quick ? 4 : 16;
    std::vector<float> a(size_t(rows * n), 0.5f), b(size_t(n * n), 0.25f), out(size_t(rows * n));
    std::vector<float> buf(size_t(*std::max_element(floats.begin(), floats.end())), 1.f);
    auto run = [&](int64_t count) {
        c.barrier()->wait();
        const auto t0 = Clock::now();
        for (int i = 0; i < segments; ++i) {
            gemm<float>(false, false, rows, n, n, 1.f, a.data(), n, b.data(), n, 0.f, out.data(),
                        n);
            if (count > 0)
                c.all_reduce(std::span<float>(buf.data(), size_t(count)), ReduceOp::sum)->wait();
        }
        c.barrier()->wait();
        return seconds_since(t0);
    };
    for (int64_t f : floats) run(f);  // warm each size's scratch
    double plain = 1e300;
    std::vector<double> synced(floats.size(), 1e300);
    for (int round = 0; round < 3; ++round) {
        plain = std::min(plain, run(0));
        for (size_t i = 0; i < floats.size(); ++i) synced[i] = std::min(synced[i], run(floats[i]));
    }
    std::vector<double> cost;
    for (double s : synced) cost.push_back(std::max(0.0, (s - plain) / segments));
    return cost;
}

// The buffers the tp collectives are measured at (floats): 256 KiB, 1 MiB and
// 4 MiB, a micro-batch's activations of 64 to 1024 token rows at hidden 1024.
const std::vector<int64_t> k_tp_floats = {64 << 10, 256 << 10, 1 << 20};

// The collectives' wait beyond their transfer at the bandwidth measured on
// large buffers (MachineModel::shared_sync_s): the 256 KiB cost less that
// transfer. And the whole costs by size for tp_collective_by_group.
double shared_sync_and_costs(Communicator& c, double allreduce_gbps, bool quick,
                             std::vector<TpCollectiveCost>* by_size) {
    const std::vector<double> cost = collective_costs(c, k_tp_floats, quick);
    const int ranks = c.size();
    for (size_t i = 0; i < cost.size(); ++i)
        by_size->push_back({ranks, 4.0 * double(k_tp_floats[i]), cost[i]});
    const double transfer =
        2.0 * (ranks - 1) / ranks * 4.0 * double(k_tp_floats[0]) / (allreduce_gbps * 1e9);
    return std::max(0.0, cost[0] - transfer);
}

// ZeRO's gradient reduction as the runtime runs it (GradSync): reduce-scatter
// of the buffer, then all-gather of the shards back into it. Open MPI
// runs the pair differently from its all-reduce (comm_mpi.cpp), so it has a
// rate of its own.
double measure_zero_pair(Communicator& c, int64_t floats, double min_s) {
    const int64_t chunk = floats / c.size();
    std::vector<float> buf(size_t(chunk * c.size()), 1.f), shard(size_t(chunk), 0.f);
    return best_bus_gbps(c, 4.0 * double(buf.size()), min_s, [&] {
        c.reduce_scatter(std::span<const float>(buf), std::span<float>(shard), ReduceOp::sum)
            ->wait();
        c.all_gather(std::span<const float>(shard), std::span<float>(buf))->wait();
    });
}

}  // namespace

RankFigures measure_rank_figures(Communicator& c, bool quick) {
    RankFigures f;
    const int64_t floats = quick ? (1 << 20) : (16 << 20);
    const double min_s = quick ? 0.02 : 0.2;
    std::tie(f.allreduce_gbps, f.p2p_gbps) = measure_bandwidths(c, floats, min_s);
    // Every rank must take rank 0's bandwidth for the same formula.
    float gbps = float(f.allreduce_gbps);
    c.broadcast(std::span<float>(&gbps, 1), 0)->wait();
    // The wait by group size, every rank at work: groups of g consecutive
    // ranks (as tensor parallelism groups them), each all-reducing within
    // itself. A smaller group waits for fewer peers the kernel is not running.
    for (int g = 2; g < c.size(); g *= 2) {
        if (c.size() % g != 0) continue;
        std::vector<int> members;
        for (int r = c.rank() / g * g; r < (c.rank() / g + 1) * g; ++r) members.push_back(r);
        auto group = c.split(members, fmt::format("calibration group of {}", g));
        const double group_gbps = measure_bandwidths(*group, floats, min_s).first;
        f.allreduce_by_group.emplace_back(double(g), group_gbps);
        f.zero_by_group.emplace_back(double(g), measure_zero_pair(*group, floats, min_s));
        f.sync_by_group.emplace_back(
            double(g), shared_sync_and_costs(*group, float(group_gbps), quick, &f.tp_collective));
    }
    f.sync_s = shared_sync_and_costs(c, gbps, quick, &f.tp_collective);
    f.sync_by_group.emplace_back(double(c.size()), f.sync_s);
    f.allreduce_by_group.emplace_back(double(c.size()), f.allreduce_gbps);
    f.zero_by_group.emplace_back(double(c.size()), measure_zero_pair(c, floats, min_s));
    return f;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

RankFigures median_rank_figures(const std::vector<RankFigures>& rounds) {
    auto med = [&](const auto& get) { return median_over(rounds, get); };
    RankFigures m = rounds.front();
    m.allreduce_gbps = med([](const RankFigures& r) { return r.allreduce_gbps; });
    m.p2p_gbps = med([](const RankFigures& r) { return r.p2p_gbps; });
    m.sync_s = med([](const RankFigures& r) { return r.sync_s; });
    median_table(m, rounds, &RankFigures::sync_by_group);
    median_table(m, rounds, &RankFigures::allreduce_by_group);
    median_table(m, rounds, &RankFigures::zero_by_group);
    for (size_t i = 0; i < m.tp_collective.size(); ++i)
        m.tp_collective[i].s = med([&](const RankFigures& r) { return r.tp_collective[i].s; });
    return m;
}

void emit_rank_tables(YAML::Emitter& y, const RankFigures& f) {
    auto groups = [&](const char* key, const char* value,
                      const std::vector<std::pair<double, double>>& t) {
        y << YAML::Key << key << YAML::Value << YAML::BeginSeq;
        for (auto [g, x] : t)
            y << YAML::Flow << YAML::BeginMap << YAML::Key << "group" << YAML::Value << int64_t(g)
              << YAML::Key << value << YAML::Value << x << YAML::EndMap;
        y << YAML::EndSeq;
    };
    groups("shared_sync_by_group", "s", f.sync_by_group);
    groups("allreduce_gbps_by_group", "gbps", f.allreduce_by_group);
    groups("zero_gbps_by_group", "gbps", f.zero_by_group);
    // Already ascending by group, then bytes, as the planner reads it:
    // measure_rank_figures measures the groups smallest first, the world last.
    y << YAML::Key << "tp_collective_by_group" << YAML::Value << YAML::BeginSeq;
    for (const TpCollectiveCost& c : f.tp_collective)
        y << YAML::Flow << YAML::BeginMap << YAML::Key << "group" << YAML::Value << c.group
          << YAML::Key << "bytes" << YAML::Value << int64_t(c.bytes) << YAML::Key << "s"
          << YAML::Value << c.s << YAML::EndMap;
    y << YAML::EndSeq;
}

}  // namespace loom::cli
