// `loom plan --calibrate` and `--calibration FILE` (plan_calibrate.h).
// The shape curve rate(R) = peak x R / (R + half_rows) is fitted to GEMMs of
// R x K times K x N at one thread (least squares on log rates over a grid of
// half_rows), since that is the form the planner applies per micro-batch.
#include "cli/plan_calibrate.h"

#include <fmt/format.h>
#include <omp.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <thread>
#include <tuple>
#include <vector>

#include "cli/calibrate_ranks.h"
#include "comm/comm_local.h"
#include "comm/comm_mpi.h"
#include "core/check.h"
#include "models/model.h"
#include "models/model_config.h"
#include "ops/adamw.h"
#include "ops/gemm.h"
#include "train/plan_model.h"

namespace loom::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Best GFLOP/s of `once` (`flops` each call) over 3 timed rounds of at
// least `min_s` each, after one warm-up call.
template <typename F>
double best_gflops(double flops, double min_s, const F& once) {
    once();
    double best = 0;
    for (int round = 0; round < 3; ++round) {
        int reps = 0;
        const auto t0 = Clock::now();
        double dt = 0;
        do {
            once();
            ++reps;
            dt = seconds_since(t0);
        } while (dt < min_s);
        best = std::max(best, flops * reps / dt / 1e9);
    }
    return best;
}

// AdamW's update at one thread over buffers far larger than the caches, in
// parameters a second: bound by memory (28 bytes a parameter).
double adamw_rate(int64_t n, double min_s) {
    std::vector<float> p(size_t(n), 0.5f), g(size_t(n), 0.01f), m(size_t(n), 0.f),
        v(size_t(n), 0.f);
    omp_set_num_threads(1);
    int64_t step = 0;
    auto once = [&] {
        adamw_update(p.data(), g.data(), m.data(), v.data(), n, AdamWParams{}, ++step);
    };
    // best_gflops counts 1e9 of its unit a second: here parameters.
    return 1e9 * best_gflops(double(n), min_s, once);
}

// Every core running a one-thread M x N x K GEMM of its own at once, as
// single-threaded ranks filling a node do: GFLOP/s per core. A core alone
// may run faster (boost clocks, the memory bus and last-level cache to
// itself), which is what the one-thread figures measure.
double all_cores_gflops(int64_t M, int64_t N, int64_t K, int cores, double min_s) {
    std::vector<std::vector<float>> a, b, c;
    a.resize(size_t(cores));
    b.resize(size_t(cores));
    c.resize(size_t(cores));
    std::vector<float*> bp(static_cast<size_t>(cores));
    for (int t = 0; t < cores; ++t) {
        a[size_t(t)].assign(size_t(M * K), 0.5f);
        bp[size_t(t)] = gemm_operand_buffer(b[size_t(t)], K * N);
        std::fill_n(bp[size_t(t)], K * N, 0.25f);
        c[size_t(t)].assign(size_t(M * N), 0.f);
    }
    const double flops = 2.0 * double(M) * double(N) * double(K);
    double best = 0;
    for (int round = 0; round < 4; ++round) {  // the first warms every core's buffers
        int64_t reps = 0;
        const auto t0 = Clock::now();
#pragma omp parallel num_threads(cores) reduction(+ : reps)
        {
            omp_set_num_threads(1);  // the GEMM's own regions run on this thread
            const auto t = size_t(omp_get_thread_num());
            do {
                gemm<float>(false, false, M, N, K, 1.f, a[t].data(), K, bp[t], N, 0.f, c[t].data(),
                            N);
                ++reps;
            } while (seconds_since(t0) < min_s);
        }
        const double rate = flops * double(reps) / seconds_since(t0) / 1e9 / cores;
        if (round > 0) best = std::max(best, rate);
    }
    return best;
}

// An M x N x K fp32 GEMM on `threads` OpenMP threads.
double gemm_gflops(int64_t M, int64_t N, int64_t K, int threads, double min_s) {
    // B where the model's weights are (gemm_operand_buffer), not where malloc puts it.
    std::vector<float> a(size_t(M * K), 0.5f), bv, c(size_t(M * N));
    float* b = gemm_operand_buffer(bv, K * N);
    std::fill_n(b, K * N, 0.25f);
    omp_set_num_threads(threads);
    return best_gflops(2.0 * double(M) * double(N) * double(K), min_s, [&] {
        gemm<float>(false, false, M, N, K, 1.f, a.data(), K, b, N, 0.f, c.data(), N);
    });
}

// A linear layer's forward and backward GEMMs (Y = X W, dX = dY W^T,
// dW = X^T dY) for `rows` tokens, W `in` x `out`, one thread.
double linear_gflops(int64_t rows, int64_t in, int64_t out, double min_s) {
    std::vector<float> x(size_t(rows * in), 0.5f), wv, yv, dx(size_t(rows * in)),
        dw(size_t(in * out));
    float* w = gemm_operand_buffer(wv, in * out);  // the B operands
    float* y = gemm_operand_buffer(yv, rows * out);
    std::fill_n(w, in * out, 0.25f);
    std::fill_n(y, rows * out, 0.125f);
    omp_set_num_threads(1);
    return best_gflops(6.0 * double(rows) * double(in) * double(out), min_s, [&] {
        gemm<float>(false, false, rows, out, in, 1.f, x.data(), in, w, out, 0.f, y, out);
        gemm<float>(false, true, rows, in, out, 1.f, y, out, w, out, 0.f, dx.data(), in);
        gemm<float>(true, false, in, out, rows, 1.f, x.data(), in, y, out, 0.f, dw.data(), out);
    });
}

struct Fit {
    double peak = 0, half_rows = 0, rms_log = 0;
};

Fit fit_shape(const std::vector<std::pair<double, double>>& rows_rate) {
    Fit best;
    best.rms_log = 1e300;
    for (double h = 0; h <= 8192; h = h < 1 ? 1 : h * 1.05) {
        double mean = 0;
        for (auto [r, g] : rows_rate) mean += std::log(g) - std::log(r / (r + h));
        mean /= double(rows_rate.size());
        double err = 0;
        for (auto [r, g] : rows_rate) {
            const double d = std::log(g) - mean - std::log(r / (r + h));
            err += d * d;
        }
        err = std::sqrt(err / double(rows_rate.size()));
        if (err < best.rms_log) best = {std::exp(mean), h, err};
    }
    return best;
}

// The narrow side's curve (MachineModel::gemm_half_narrow): rates relative to
// d = 1024 fitted to (d / (d + h)) / (1024 / (1024 + h)), least squares on logs.
double fit_narrow(const std::vector<std::pair<double, double>>& d_relative) {
    double best_h = 0, best_err = 1e300;
    for (double h = 0; h <= 8192; h = h < 1 ? 1 : h * 1.05) {
        double err = 0;
        for (auto [d, r] : d_relative) {
            const double e = std::log(r) - std::log(d / (d + h) * (1024 + h) / 1024);
            err += e * e;
        }
        if (err < best_err) {
            best_err = err;
            best_h = h;
        }
    }
    return best_h;
}

// Started by mpirun/srun: measure MPI's transport, not in-process copies.
bool launched_by_mpi() {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"})
        if (std::getenv(v)) return true;
    return false;
}

double load_average() {
    double l = 0;
    if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
        if (std::fscanf(f, "%lf", &l) != 1) l = 0;
        std::fclose(f);
    }
    return l;
}

// A training step's achieved rate: forward and backward of a 2-block BERT
// classifier (hidden C, 4C intermediate, C/64 heads) on 2 x 128 tokens at one
// thread, in the planner's FLOPs (forward_flops_per_token, x3), and over the
// GEMM of its rows measured right before and after it.
struct StepRate {
    double rows = 0, gflops = 0;
    double efficiency = 0;  // gflops over the GEMM beside it
};
StepRate block_step_rate(int64_t C, double min_s) {
    const int64_t B = 2, T = 128;
    const ModelConfig c = parse_hf_config(
        fmt::format(R"({{"architectures": ["BertForSequenceClassification"], "model_type": "bert",
            "vocab_size": 512, "hidden_size": {}, "num_hidden_layers": 2,
            "num_attention_heads": {}, "intermediate_size": {}, "max_position_embeddings": {},
            "type_vocab_size": 2, "num_labels": 2}})",
                    C, std::max<int64_t>(1, C / 64), 4 * C, T),
        "calibration block");
    auto model = build_model(c);
    model->init(1);
    std::vector<int64_t> ids(size_t(B * T)), labels = {0, 1};
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i * 37 % 512);
    ModelInputs in;
    in.B = B;
    in.T = T;
    in.input_ids = ids.data();
    in.labels = labels.data();
    omp_set_num_threads(1);
    auto once = [&] {
        model->zero_grad();
        model->forward(in, DropoutPlan{});
        model->backward(1.0);
    };
    const PlanModel pm = plan_model_from_config(c);
    const double flops = 3.0 * forward_flops_per_token(pm, T) * double(B * T);
    // Timed as the GEMMs are (best of 3 rounds, after a call that plans the
    // arena and touches its memory) and between two of them: on a shared
    // host a mean of a few steps against a best GEMM seconds earlier put
    // the ratio anywhere from 0.76 to 0.90, and tensor-parallel blocks
    // multiply its complement by up to tp - 1 (block_replicated_factor).
    StepRate r;
    r.rows = double(B * T);
    const double before = gemm_gflops(B * T, C, C, 1, min_s);
    r.gflops = best_gflops(flops, min_s, once);
    const double after = gemm_gflops(B * T, C, C, 1, min_s);
    r.efficiency = r.gflops / (0.5 * (before + after));
    return r;
}

// One round's raw figures; (x, GFLOP/s) pairs for the GEMM tables.
struct Figures {
    std::vector<std::pair<double, double>> by_rows, by_narrow, by_threads;
    StepRate step;
    double all_cores_share = 1;  // per-core GEMM rate with every core busy, over one alone
    double adamw_params_per_s = 0;
    RankFigures ranks;
};

Figures measure_round(const CalibrateOptions& o, int cores,
                      const std::function<RankFigures()>& measure_ranks) {
    const double min_s = o.quick ? 0.02 : 0.2;
    const int64_t NK = o.quick ? 256 : 1024;
    Figures f;
    // GEMM rate by rows at one thread: what one single-threaded rank gets.
    for (int64_t M : {8, 32, 128, 512, 2048}) {
        f.by_rows.emplace_back(double(M), gemm_gflops(M, NK, NK, 1, min_s));
        fmt::print("gemm {} x {} x {}, 1 thread: {:.1f} GFLOP/s\n", M, NK, NK,
                   f.by_rows.back().second);
    }
    // The narrow side at one thread: a linear layer's forward and backward
    // for 256 token rows, d x 1024 and 1024 x d (a tensor-parallel shard of a
    // row- and of a column-parallel layer).
    for (int64_t d : {1024, 512, 256, 128}) {
        // The two layers' time added up: the rate of the pair.
        f.by_narrow.emplace_back(double(d), 2.0 / (1.0 / linear_gflops(256, d, 1024, min_s) +
                                                   1.0 / linear_gflops(256, 1024, d, min_s)));
        fmt::print("gemm 256 rows, narrow side {}, 1 thread: {:.1f} GFLOP/s\n", d,
                   f.by_narrow.back().second);
    }
    // Threads per rank: the large shape on 1..cores threads.
    for (int t = 1; t <= cores; ++t) {
        f.by_threads.emplace_back(double(t), gemm_gflops(2048, NK, NK, t, min_s));
        fmt::print("gemm 2048 x {} x {}, {} thread(s): {:.1f} GFLOP/s\n", NK, NK, t,
                   f.by_threads.back().second);
    }
    if (cores > 1) {
        // The 512-row rate again, beside the every-core one: the ratio
        // should see one moment of the machine, not two seconds apart.
        const double alone = gemm_gflops(512, NK, NK, 1, min_s);
        const double all = all_cores_gflops(512, NK, NK, cores, min_s);
        f.all_cores_share = all / alone;
        fmt::print(
            "gemm 512 x {} x {} on every core at once: {:.1f} GFLOP/s a core, {:.2f} of one "
            "core alone\n",
            NK, NK, all, f.all_cores_share);
    }
    f.step = block_step_rate(NK, min_s);
    f.adamw_params_per_s = adamw_rate(o.quick ? (1 << 20) : (1 << 23), min_s);
    fmt::print("AdamW update, 1 thread: {:.0f}M parameters/s\n", f.adamw_params_per_s / 1e6);
    fmt::print(
        "training step of 2 BERT blocks (hidden {}, {} token rows), 1 thread: {:.1f} GFLOP/s, "
        "{:.2f} of the GEMM of its rows beside it\n",
        NK, int64_t(f.step.rows), f.step.gflops, f.step.efficiency);
    omp_set_num_threads(cores);
    f.ranks = measure_ranks();
    fmt::print(
        "all-reduce bus bandwidth {:.2f} GB/s, point-to-point {:.2f} GB/s; a collective "
        "between compute segments {:.2f} ms beyond its transfer\n",
        f.ranks.allreduce_gbps, f.ranks.p2p_gbps, 1e3 * f.ranks.sync_s);
    for (size_t i = 0; i < f.ranks.sync_by_group.size(); ++i)
        fmt::print(
            "in groups of {}: all-reduce {:.2f} GB/s, ZeRO's reduce-scatter + all-gather "
            "{:.2f} GB/s, a collective {:.2f} ms beyond its transfer\n",
            int(f.ranks.sync_by_group[i].first), f.ranks.allreduce_by_group[i].second,
            f.ranks.zero_by_group[i].second, 1e3 * f.ranks.sync_by_group[i].second);
    for (const TpCollectiveCost& c : f.ranks.tp_collective)
        fmt::print("an all-reduce of {} KiB in groups of {} between compute segments: {:.2f} ms\n",
                   int64_t(c.bytes) >> 10, c.group, 1e3 * c.s);
    return f;
}

// Every figure's median over the rounds: on a shared machine one round's
// figure can move 2-4x with what the kernel ran beside it, and the plan
// should not follow one unlucky round.
Figures median_figures(const std::vector<Figures>& rounds) {
    auto med = [&](const auto& get) { return median_over(rounds, get); };
    Figures m = rounds.front();
    auto table = [&](std::vector<std::pair<double, double>> Figures::*t) {
        median_table(m, rounds, t);
    };
    table(&Figures::by_rows);
    table(&Figures::by_narrow);
    table(&Figures::by_threads);
    m.step.gflops = med([](const Figures& r) { return r.step.gflops; });
    m.step.efficiency = med([](const Figures& r) { return r.step.efficiency; });
    m.adamw_params_per_s = med([](const Figures& r) { return r.adamw_params_per_s; });
    m.all_cores_share = med([](const Figures& r) { return r.all_cores_share; });
    std::vector<RankFigures> ranks;
    for (const Figures& r : rounds) ranks.push_back(r.ranks);
    m.ranks = median_rank_figures(ranks);
    return m;
}

void emit_table(YAML::Emitter& y, const char* key, const char* x_key,
                const std::vector<std::pair<double, double>>& t,
                const std::vector<std::pair<const char*, int64_t>>& extra = {}) {
    y << YAML::Key << key << YAML::Value << YAML::BeginSeq;
    for (auto [x, g] : t) {
        y << YAML::Flow << YAML::BeginMap << YAML::Key << x_key << YAML::Value << int64_t(x);
        for (auto [k, v] : extra) y << YAML::Key << k << YAML::Value << v;
        y << YAML::Key << "gflops" << YAML::Value << g << YAML::EndMap;
    }
    y << YAML::EndSeq;
}

void calibrate_into(const CalibrateOptions& o, int ranks, const char* how,
                    const std::function<RankFigures()>& measure_ranks) {
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    const double load = load_average();
    const int64_t NK = o.quick ? 256 : 1024;
    std::vector<Figures> rounds;
    for (int r = 0; r < o.rounds; ++r) {
        if (o.rounds > 1) fmt::print("round {} of {}\n", r + 1, o.rounds);
        rounds.push_back(measure_round(o, cores, measure_ranks));
    }
    const Figures f = median_figures(rounds);
    if (o.rounds > 1) fmt::print("medians of {} rounds:\n", o.rounds);
    const Fit fit = fit_shape(f.by_rows);
    fmt::print("fit: {:.1f} GFLOP/s x rows / (rows + {:.0f}), rms log error {:.3f}\n", fit.peak,
               fit.half_rows, fit.rms_log);
    std::vector<std::pair<double, double>> narrow_relative;
    for (auto [d, g] : f.by_narrow) narrow_relative.emplace_back(d, g / f.by_narrow.front().second);
    const double half_narrow = fit_narrow(narrow_relative);
    fmt::print("narrow side: x (d / (d + {:.0f})) relative to d = 1024\n", half_narrow);
    // Each round's ratio to the GEMM beside it, not the medians' ratio: the
    // rates move between a round's measurements.
    const double efficiency = f.step.efficiency;
    fmt::print("training step: {:.1f} GFLOP/s, {:.2f} of the GEMM rate at {} rows beside it\n",
               f.step.gflops, efficiency, int64_t(f.step.rows));
    const RankFigures& figs = f.ranks;
    fmt::print("all-reduce bus bandwidth {:.2f} GB/s, point-to-point {:.2f} GB/s ({} {})\n",
               figs.allreduce_gbps, figs.p2p_gbps, ranks, how);
    fmt::print(
        "a collective between compute segments: {:.2f} ms beyond its transfer ({} ranks on "
        "{} cores)\n",
        1e3 * figs.sync_s, ranks, cores);

    YAML::Emitter y;
    y.SetDoublePrecision(5);
    y << YAML::Comment(fmt::format(
        "loom plan --calibrate: {} cores, load average {:.2f} at the start (a busy machine "
        "measures low). Bandwidths are between {} {}. Each figure is the median of {} round(s).",
        cores, load, ranks, how, o.rounds));
    y << YAML::BeginMap;
    emit_table(y, "gemm_one_thread", "rows", f.by_rows, {{"n", NK}, {"k", NK}});
    emit_table(y, "gemm_narrow", "narrow", f.by_narrow);
    emit_table(y, "gemm_threads", "threads", f.by_threads);
    y << YAML::Key << "cores" << YAML::Value << cores;
    y << YAML::Key << "gflops_per_core" << YAML::Value << fit.peak;
    y << YAML::Key << "gemm_half_rows" << YAML::Value << std::round(fit.half_rows);
    y << YAML::Key << "gemm_half_narrow" << YAML::Value << std::round(half_narrow);
    y << YAML::Key << "step_efficiency" << YAML::Value << efficiency;
    y << YAML::Key << "all_cores_share" << YAML::Value << f.all_cores_share;
    y << YAML::Key << "adamw_params_per_s" << YAML::Value << f.adamw_params_per_s;
    y << YAML::Key << "allreduce_gbps" << YAML::Value << figs.allreduce_gbps;
    y << YAML::Key << "p2p_gbps" << YAML::Value << figs.p2p_gbps;
    y << YAML::Key << "shared_sync_s" << YAML::Value << figs.sync_s;
    y << YAML::Key << "shared_sync_ranks" << YAML::Value << ranks;
    emit_rank_tables(y, figs);
    y << YAML::Key << "rounds" << YAML::Value << o.rounds;
    y << YAML::Key << "load_average" << YAML::Value << load;
    y << YAML::EndMap;
    if (!o.out.empty()) {
        std::ofstream file(o.out);
        LOOM_CHECK(file.good(), "--calibrate: cannot write '{}'", o.out);
        file << y.c_str() << "\n";
        fmt::print("wrote {}\n", o.out);
    }
}

}  // namespace

void run_calibrate(const CalibrateOptions& o) {
    LOOM_CHECK(o.rounds >= 1, "--calibrate-rounds: expected at least 1, got {}", o.rounds);
    if (launched_by_mpi() && MpiSession::available()) {
        // Rank 0 measures the GEMMs while the others wait; all measure the
        // bandwidths over MPI; rank 0 writes the file.
        MpiSession mpi;
        CommOptions co;
        co.spin_s = 0.002;  // waiting ranks must not steal the cores being measured
        auto world = comm_mpi_world(co);
        LOOM_CHECK(world->size() >= 2, "--calibrate under mpirun needs at least 2 ranks");
        auto measure = [&] { return measure_rank_figures(*world, o.quick); };
        if (world->rank() == 0) {
            calibrate_into(o, world->size(), "ranks of MPI", [&] {
                world->barrier()->wait();
                return measure();
            });
        } else {
            // Checked 20 times a second, not polled: a waiting rank that wakes
            // every half millisecond takes the core from rank 0's GEMMs
            // (with 8 ranks on 2 cores the GEMM fit's error tripled).
            for (int r = 0; r < o.rounds; ++r) {
                auto solo_done = world->barrier();
                while (!solo_done->test())
                    std::this_thread::sleep_for(std::chrono::milliseconds(50));
                measure();
            }
        }
        return;
    }
    LOOM_CHECK(o.ranks >= 2, "--calibrate-ranks: expected at least 2, got {}", o.ranks);
    calibrate_into(o, o.ranks, "threads of one process (run under mpirun to measure MPI)", [&] {
        RankFigures out;
        comm_local_run(o.ranks, [&](Communicator& c) {
            RankFigures f = measure_rank_figures(c, o.quick);
            if (c.rank() == 0) out = std::move(f);
        });
        return out;
    });
}

}  // namespace loom::cli
