// `loom plan job.yaml --world N`: every dp x tp x pp layout of N ranks for the
// job's model and batch, with predicted memory per rank and step time, best
// first (parallel/layout_plan.h; the cost model is docs/cost-model.md).
// With --machine NAME the cluster planner prices GPU nodes instead
// (cli/plan_gpu.h, docs/plan-gpu.md); --calibrate measures this machine for
// the CPU planner (cli/plan_calibrate.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/hub_model.h"
#include "cli/plan_calibrate.h"
#include "cli/plan_gpu.h"
#include "config/job.h"
#include "core/check.h"
#include "models/model_config.h"
#include "parallel/layout_plan.h"
#include "train/plan_model.h"

namespace loom::cli {

namespace {

// "3.9" or, measured by group size, "1.2 in groups of 2, 2.5 of 4, 3.9 of 8".
std::string by_group(const std::vector<std::pair<int, double>>& t, double one, double scale) {
    if (t.empty()) return fmt::format("{:.1f}", scale * one);
    std::string out;
    for (auto [g, x] : t)
        out += fmt::format("{}{:.1f} {}{}", out.empty() ? "" : ", ", scale * x,
                           out.empty() ? "in groups of " : "of ", g);
    return out;
}

// "0.20 / 0.50 / 1.90 ms at 256 / 1024 / 4096 KiB in groups of 2; 0.30 / ... of 8"
std::string tp_costs(const std::vector<TpCollectiveCost>& t) {
    std::string out;
    for (size_t i = 0; i < t.size();) {
        size_t end = i;
        while (end < t.size() && t[end].group == t[i].group) ++end;
        std::string ms, kib;
        for (size_t k = i; k < end; ++k) {
            ms += fmt::format("{}{:.2f}", k > i ? " / " : "", 1e3 * t[k].s);
            kib += fmt::format("{}{}", k > i ? " / " : "", int64_t(t[k].bytes) >> 10);
        }
        out += fmt::format("{}{} ms at {} KiB {}{}", out.empty() ? "" : "; ", ms, kib,
                           out.empty() ? "in groups of " : "of ", t[i].group);
        i = end;
    }
    return out;
}

struct PlanOptions {
    std::string job_path;
    std::vector<std::string> overrides;
    int world = 0;
    int top = 0;
    bool all = false;
    MachineModel machine;
    GpuPlanOptions gpu;  // used when --machine is given
    bool calibrate = false;
    CalibrateOptions calib;
    std::vector<std::string> calibration;  // files from --calibrate for the CPU planner
};

double gib(double bytes) {
    return bytes / double(1 << 30);
}

std::string layout_name(const LayoutChoice& l) {
    std::string s = fmt::format("dp{} tp{} pp{}", l.dp, l.tp, l.pp);
    if (l.pp > 1) s += fmt::format(" {}", schedule_kind_name(l.schedule));
    if (l.checkpointing) s += " ckpt";
    return s;
}

void run_plan(const PlanOptions& o) {
    if (!o.gpu.machine.empty()) {
        GpuPlanOptions g = o.gpu;
        g.top = o.top;
        g.all = o.all;
        run_gpu_plan(o.job_path, o.overrides, g);
        return;
    }
    // The plan needs the model's config and the batch, not its tokenizer or weights.
    JobParseOptions po;
    po.model_config_only = true;
    Job job = job_load(o.job_path, o.overrides, po);
    resolve_hub_model(job);
    ModelConfig config = load_hf_config(job.model.config_path);
    const Task want = job.task;
    if (config.task != want) config_set_task(config, want);
    const PlanModel m = plan_model_from_config(config);
    const DistributionArgs& d = job.distribution;
    int world = o.world;
    if (world <= 0) {
        const int64_t dp = std::max<int64_t>(1, d.data_parallel_degree);
        world = int(dp * d.tensor_parallel_degree * d.pipeline_parallel_degree);
    }
    // The job's global batch, held fixed across layouts: per-device batch x
    // accumulation (or pipeline micro-batches, which split the per-device
    // batch as SMP does) x the job's data-parallel degree.
    const int64_t job_dp = std::max<int64_t>(1, d.data_parallel_degree);
    PlanRequest q;
    q.world = world;
    q.seq = job.data.max_seq_length;
    q.microbatches =
        std::max<int64_t>({1, d.microbatches, job.training.gradient_accumulation_steps});
    q.global_batch = job.training.per_device_train_batch_size * job_dp *
                     (d.pipeline_parallel_degree > 1 || d.microbatches > 1
                          ? 1
                          : job.training.gradient_accumulation_steps);
    if (q.global_batch % q.microbatches) q.microbatches = 1;
    q.zero_stage = int(d.zero_stage);
    MachineModel mc = o.machine;
    if (!o.calibration.empty()) {
        // The file holds every measured figure; how ranks spread over nodes
        // and the memory limit stay the command line's.
        MachineModel cal = machine_from_calibrations(o.calibration);
        cal.ranks_per_node = mc.ranks_per_node;
        cal.memory_gib = mc.memory_gib;
        mc = cal;
    }
    const auto rows = plan_layouts(m, q, mc);
    fmt::print(
        "{} ({}): {:.1f}M parameters ({}), {} layers, hidden {}, {} heads{}; global batch {} x "
        "seq {} in {} micro-batches per replica\n",
        config.architecture, config.source, double(m.total_params) / 1e6, m.total_params, m.layers,
        m.hidden, m.heads,
        m.kv() != m.heads ? fmt::format(" ({} key/value)", m.kv()) : std::string(), q.global_batch,
        q.seq, q.microbatches);
    fmt::print(
        "machine: {} cores at {:.0f} GFLOP/s each{}{}, all-reduce {} GB/s{}, "
        "p2p {:.1f} GB/s{}{}{}; world {}{}\n\n",
        mc.cores, mc.gflops_per_core,
        mc.gemm_half_rows > 0
            ? fmt::format(" x rows / (rows + {:.0f}) per micro-batch{}", mc.gemm_half_rows,
                          mc.gemm_half_narrow > 0
                              ? fmt::format(" x a narrow side's d / (d + {:.0f}), relative",
                                            mc.gemm_half_narrow)
                              : std::string())
            : std::string(),
        fmt::format("{}{}",
                    mc.step_efficiency != 1.0
                        ? fmt::format(" x {:.2f} in a whole step", mc.step_efficiency)
                        : std::string(),
                    mc.all_cores_share != 1.0
                        ? fmt::format(" x {:.2f} with every core busy", mc.all_cores_share)
                        : std::string()),
        by_group(mc.allreduce_gbps_by_group, mc.allreduce_gbps, 1),
        mc.zero_gbps_by_group.empty()
            ? std::string()
            : fmt::format(" (ZeRO's reduce-scatter + all-gather {} GB/s)",
                          by_group(mc.zero_gbps_by_group, mc.allreduce_gbps, 1)),
        mc.p2p_gbps,
        mc.shared_sync_s > 0 || !mc.shared_sync_by_group.empty()
            ? fmt::format(", a tp collective {} ms more with {} ranks on the cores",
                          by_group(mc.shared_sync_by_group, mc.shared_sync_s, 1e3),
                          mc.shared_sync_ranks)
            : std::string(),
        mc.tp_collective_by_group.empty()
            ? std::string()
            : fmt::format(", a tp all-reduce between compute segments {} (all of it, priced "
                          "instead of transfer and wait where the node has {} ranks)",
                          tp_costs(mc.tp_collective_by_group), mc.shared_sync_ranks),
        mc.adamw_params_per_s > 0
            ? fmt::format(", AdamW {:.0f}M parameters/s per core", mc.adamw_params_per_s / 1e6)
            : std::string(),
        world,
        o.calibration.empty()
            ? std::string()
            : fmt::format(" (calibrated: {}{})", fmt::join(o.calibration, ", "),
                          o.calibration.size() > 1 ? ", each figure their median" : ""));
    fmt::print("{:<28} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>8} {:>7}\n", "layout", "peak GiB",
               "params", "optim", "acts", "step s", "compute", "comm", "bubble");
    int shown = 0;
    for (const PlanRow& r : rows) {
        if (!r.feasible) {
            if (!o.all) continue;
            fmt::print("{:<28} not feasible: {}\n", layout_name(r.layout), r.why_not);
            continue;
        }
        if (o.top > 0 && shown >= o.top) continue;
        ++shown;
        const MemoryPlan& mem = r.memory;
        const TimePlan& t = r.time;
        fmt::print(
            "{:<28} {:>9.3f} {:>8.3f} {:>8.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>8.3f} {:>6.0f}%\n",
            layout_name(r.layout), gib(mem.peak), gib(mem.params), gib(mem.optimizer),
            gib(mem.activations_in_flight), t.step_s, t.compute_s,
            t.tp_comm_s + t.pp_comm_s + t.dp_comm_s, 100 * t.bubble);
    }
    if (shown == 0) fmt::print("no feasible layout for world {}\n", world);
}

void setup_plan(CLI::App& app) {
    auto o = std::make_shared<PlanOptions>();
    CLI::App* sub = app.add_subcommand(
        "plan", "Predict memory and step time of every dp x tp x pp layout for a job");
    sub->footer(R"(
Reads the job's model config, batch (per_device_train_batch_size,
max_seq_length) and distribution block (zero_stage, microbatches), then
lists every data x tensor x pipeline layout of --world ranks (each pipeline
schedule, with and without activation checkpointing), fastest first, with
the predicted peak memory per rank and its parts. The cost model and where
its default machine figures come from: docs/cost-model.md.

  loom plan examples/bert_mlm.yaml --world 8
  loom plan job.yaml --world 16 --cores 64 --gflops-per-core 60 --memory-gib 16

Layouts that break a rule (heads not divisible by tp, more stages than
layers, over --memory-gib) are hidden; --all lists them with the reason.

GPU clusters in mixed precision (docs/plan-gpu.md, profiles in
docs/plan-machines.md); the job may name its model by config alone:
  loom plan job.yaml --machine a100-80gb-sxm --nodes 8 --explain
  loom plan job.yaml --machine h100-sxm --nodes 4 --json \
      --layout dp=2,tp=4,pp=4,micro_batch=1,global_batch=512,recompute=selective

This machine's figures for the CPU planner (docs/cost-model.md), measured
at the world size the plan is for (8 ranks sharing cores wait for each other
in ways 2 do not), each the median of 3 rounds:
  OMP_NUM_THREADS=1 mpirun -np 8 loom plan --calibrate --calibrate-out host.yaml
  loom plan job.yaml --world 8 --calibration host.yaml
On a shared machine the rates drift over an hour; calibrate again later and
plan from each figure's median over the files:
  loom plan job.yaml --world 8 --calibration before.yaml --calibration after.yaml
)");
    sub->add_option("job", o->job_path, "job file (YAML)");
    sub->add_option("--set", o->overrides, "override a job key (repeatable)")->take_all();
    sub->add_option("--world", o->world, "number of ranks (default: the job's degrees multiplied)");
    sub->add_option("--top", o->top, "show only the best N layouts");
    sub->add_flag("--all", o->all, "also list infeasible layouts with the reason");
    sub->add_option("--cores", o->machine.cores, "cores per node")->capture_default_str();
    sub->add_option("--ranks-per-node", o->machine.ranks_per_node, "ranks per node (0: all)")
        ->capture_default_str();
    sub->add_option("--gflops-per-core", o->machine.gflops_per_core,
                    "sustained fp32 GEMM GFLOP/s of one core in a training step")
        ->capture_default_str();
    sub->add_option("--allreduce-gbps", o->machine.allreduce_gbps, "all-reduce bandwidth, GB/s")
        ->capture_default_str();
    sub->add_option("--p2p-gbps", o->machine.p2p_gbps, "point-to-point bandwidth, GB/s")
        ->capture_default_str();
    sub->add_option("--memory-gib", o->machine.memory_gib, "memory per rank, GiB (0: no limit)")
        ->capture_default_str();
    GpuPlanOptions& g = o->gpu;
    sub->add_option("--machine", g.machine,
                    "GPU node profile (a100-40gb-sxm, a100-80gb-sxm, h100-sxm, h200-sxm, "
                    "p4d.24xlarge, p4de.24xlarge, p5.48xlarge, p5e.48xlarge) or a YAML file; "
                    "selects the cluster planner (docs/plan-gpu.md)");
    sub->add_option("--nodes", g.nodes, "nodes of --machine")->capture_default_str();
    sub->add_option("--layout", g.layout,
                    "price one layout: dp=8,tp=4,pp=12,micro_batch=2,global_batch=2048,"
                    "recompute=full|selective|none,virtual_stages=1,sequence_parallel=false,"
                    "zero_stage=0,precision=bf16 (with --machine)");
    sub->add_option("--global-batch", g.global_batch, "global batch (default: the job's)");
    sub->add_flag("--json", g.json, "one JSON object per layout (with --machine)");
    sub->add_flag("--explain", g.explain, "say why the fastest layout wins (with --machine)");
    sub->add_option("--max-tp", g.bounds.max_tp, "largest tensor-parallel degree to search");
    sub->add_option("--max-pp", g.bounds.max_pp, "largest pipeline degree to search");
    sub->add_option("--micro-batch", g.bounds.micro_batch, "search only this micro-batch size");
    sub->add_flag("--fused-attention", g.bounds.fused_attention,
                  "price flash-style fused attention (no s x s tensors)");
    sub->add_flag("--calibrate", o->calibrate,
                  "measure this machine for the CPU planner: GEMM rate by shape and threads, "
                  "the share of it a training step keeps, AdamW's update rate, all-reduce and "
                  "point-to-point bandwidth, and what a collective waits for ranks sharing the "
                  "cores, by group size (no job needed; run it under mpirun -np N for N ranks)");
    sub->add_option("--calibrate-out", o->calib.out, "YAML file --calibrate writes");
    sub->add_option("--calibrate-ranks", o->calib.ranks, "ranks for the bandwidths")
        ->capture_default_str();
    sub->add_flag("--quick", o->calib.quick,
                  "--calibrate with small shapes and short timings, one round");
    sub->add_option("--calibrate-rounds", o->calib.rounds,
                    "measure this many times and keep each figure's median (a shared machine "
                    "moves single measurements by 2-4x)")
        ->capture_default_str();
    sub->add_option("--calibration", o->calibration,
                    "a file from --calibrate: this machine's figures for the CPU planner; give it "
                    "again with more files of the same machine (calibrated at other times) to "
                    "plan from each figure's median")
        ->allow_extra_args(false);
    sub->callback([o, sub] {
        // Flags of the other planner would be silently ignored: refuse them.
        if (!o->gpu.machine.empty())
            for (const char* cpu_only : {"--world", "--cores", "--ranks-per-node", "--gflops-per-core",
                                         "--allreduce-gbps", "--p2p-gbps", "--memory-gib",
                                         "--calibration"})
                if (sub->count(cpu_only) > 0)
                    throw loom::Error(fmt::format(
                        "{} is for the CPU planner; with --machine give --nodes (the profile "
                        "holds the machine's figures)",
                        cpu_only));
        if (o->calibrate) {
            if (o->calib.quick && sub->count("--calibrate-rounds") == 0) o->calib.rounds = 1;
            run_calibrate(o->calib);
            return;
        }
        if (o->job_path.empty()) throw loom::Error("plan: a job file is required (or --calibrate)");
        if (o->gpu.machine.empty())
            for (const char* gpu_only : {"--nodes", "--layout", "--global-batch", "--json",
                                         "--explain", "--max-tp", "--max-pp", "--micro-batch",
                                         "--fused-attention"})
                if (sub->count(gpu_only) > 0)
                    throw loom::Error(fmt::format("{} needs --machine NAME", gpu_only));
        if (!o->calibrate)
            for (const char* calib_only :
                 {"--calibrate-out", "--calibrate-ranks", "--calibrate-rounds", "--quick"})
                if (sub->count(calib_only) > 0)
                    throw loom::Error(fmt::format("{} goes with --calibrate", calib_only));
        run_plan(*o);
    });
}

}  // namespace

LOOM_COMMAND(setup_plan);

}  // namespace loom::cli
