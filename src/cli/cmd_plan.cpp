// `loom plan job.yaml --world N`: every dp x tp x pp layout of N ranks for the
// job's model and batch, with predicted memory per rank and step time, best
// first (parallel/layout_plan.h; the cost model is docs/cost-model.md).
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/hub_model.h"
#include "config/job.h"
#include "io/hf_config.h"
#include "parallel/layout_plan.h"

namespace loom::cli {

namespace {

struct PlanOptions {
    std::string job_path;
    std::vector<std::string> overrides;
    int world = 0;
    int top = 0;
    bool all = false;
    MachineModel machine;
};

TaskKind plan_task(Task t) {
    switch (t) {
        case Task::masked_lm:
            return TaskKind::masked_lm;
        case Task::sequence_classification:
            return TaskKind::sequence_classification;
        case Task::question_answering:
            return TaskKind::question_answering;
        case Task::causal_lm:
            return TaskKind::causal_lm;
    }
    return TaskKind::base;
}

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
    Job job = job_load(o.job_path, o.overrides);
    resolve_hub_model(job);
    ModelConfig config = load_hf_config(job.model.config_path);
    const TaskKind want = plan_task(job.task);
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
    const MachineModel& mc = o.machine;
    const auto rows = plan_layouts(m, q, mc);
    fmt::print(
        "{} ({}): {:.1f}M parameters, {} layers, hidden {}, {} heads; global batch {} x seq "
        "{} in {} micro-batches per replica\n",
        config.architecture, config.source, double(m.total_params) / 1e6, m.layers, m.hidden,
        m.heads, q.global_batch, q.seq, q.microbatches);
    fmt::print(
        "machine: {} cores at {:.0f} GFLOP/s each, all-reduce {:.1f} GB/s, p2p {:.1f} GB/s; "
        "world {}\n\n",
        mc.cores, mc.gflops_per_core, mc.allreduce_gbps, mc.p2p_gbps, world);
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
)");
    sub->add_option("job", o->job_path, "job file (YAML)")->required();
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
    sub->callback([o] { run_plan(*o); });
}

}  // namespace

LOOM_COMMAND(setup_plan);

}  // namespace loom::cli
