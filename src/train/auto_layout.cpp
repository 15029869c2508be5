// `distribution: auto` (auto_layout.h): asks the GPU or CPU layout planner
// for the fastest feasible layout and writes it into the job.
#include "train/auto_layout.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "core/check.h"
#include "models/model_config.h"
#include "parallel/gpu_plan.h"
#include "parallel/layout_plan.h"
#include "train/plan_model.h"

namespace loom {

namespace {

constexpr double k_gib = double(1 << 30);

// What the trainer needs to know of a chosen layout.
struct Choice {
    int dp = 1, tp = 1, pp = 1;
    ScheduleKind schedule = ScheduleKind::one_f_one_b;
    int virtual_stages = 1;
    bool checkpointing = false;
    int64_t microbatches = 1;  // per replica per step
    std::string name;
    double step_s = 0, memory_gib = 0;
};

void apply(Job& job, const Choice& c, int64_t global) {
    DistributionArgs& d = job.distribution;
    d.data_parallel_degree = c.dp;
    d.tensor_parallel_degree = c.tp;
    d.pipeline_parallel_degree = c.pp;
    d.pipeline = c.schedule;
    d.virtual_stages = c.schedule == ScheduleKind::interleaved ? c.virtual_stages : 1;
    d.activation_checkpointing = c.checkpointing;
    const int64_t rows = global / c.dp;  // per replica per step
    TrainingArgs& t = job.training;
    if (c.pp > 1 || c.tp > 1) {
        // The pipeline executor splits the per-device batch into micro-batches.
        t.per_device_train_batch_size = rows;
        t.gradient_accumulation_steps = 1;
        d.microbatches = c.microbatches;
    } else {
        t.per_device_train_batch_size = rows / c.microbatches;
        t.gradient_accumulation_steps = c.microbatches;
        d.microbatches = 1;
    }
}

// The CPU planner over micro-batch counts 1, 2, 4, 8 (it holds the count
// fixed per call).
std::vector<Choice> cpu_choices(const PlanModel& m, const Job& job, int world, int ranks_on_host,
                                int64_t global, std::string& closest_reason) {
    const DistributionArgs& d = job.distribution;
    MachineModel mc;
    mc.cores = int(std::max(1u, std::thread::hardware_concurrency()));
    mc.ranks_per_node = std::max(1, ranks_on_host);
    const double ram = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    mc.memory_gib = ram / k_gib / mc.ranks_per_node;
    std::vector<Choice> out;
    for (int64_t micro = 1; micro <= 8 && micro <= global; micro *= 2) {
        PlanRequest q;
        q.world = world;
        q.global_batch = global;
        q.seq = job.data.max_seq_length;
        q.microbatches = micro;
        q.zero_stage = int(d.zero_stage);
        for (const PlanRow& r : plan_layouts(m, q, mc)) {
            const LayoutChoice& l = r.layout;
            if ((d.max_tensor_parallel_degree > 0 && l.tp > d.max_tensor_parallel_degree) ||
                (d.max_pipeline_parallel_degree > 0 && l.pp > d.max_pipeline_parallel_degree))
                continue;
            if (!r.feasible) {
                if (closest_reason.empty()) closest_reason = r.why_not;
                continue;
            }
            Choice c{l.dp, l.tp, l.pp, l.schedule, l.virtual_stages, l.checkpointing, micro, {}, 0, 0};
            c.name = fmt::format("dp{} tp{} pp{}{}{}, {} micro-batch(es) of {} rows", l.dp, l.tp,
                                 l.pp, l.pp > 1 ? fmt::format(" {}", schedule_kind_name(l.schedule)) : "",
                                 l.checkpointing ? " ckpt" : "", micro, r.workload.micro_batch);
            c.step_s = r.time.step_s;
            c.memory_gib = r.memory.peak / k_gib;
            out.push_back(c);
        }
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const Choice& a, const Choice& b) { return a.step_s < b.step_s; });
    return out;
}

std::vector<Choice> gpu_choices(const PlanModel& m, const Job& job, int world, int64_t global,
                                std::string& closest_reason, std::vector<std::string>& why) {
    const DistributionArgs& d = job.distribution;
    GpuJob g;
    g.model = m;
    g.seq = job.data.max_seq_length;
    g.machine = gpu_profile_resolve(d.machine);
    if (world < g.machine.gpus_per_node) g.machine.gpus_per_node = world;  // part of one node
    LOOM_CHECK(world % g.machine.gpus_per_node == 0,
               "{}: distribution.auto: {} ranks are not whole nodes of {} ({} GPUs each)",
               job.source, world, g.machine.name, g.machine.gpus_per_node);
    g.nodes = world / g.machine.gpus_per_node;
    GpuSearchBounds b;
    b.max_tp = int(d.max_tensor_parallel_degree);
    b.max_pp = int(d.max_pipeline_parallel_degree);
    b.zero_stage = int(d.zero_stage);
    b.precision = job.training.bf16 ? "bf16" : job.training.fp16 ? "fp16" : "fp32";
    // What the trainer can run: whole-layer checkpointing, no sequence parallelism.
    b.recompute = {Recompute::none, Recompute::full};
    b.sequence_parallel = false;
    const std::vector<GpuPlanRow> rows = gpu_plan_search(g, global, b);
    why = gpu_plan_explain(rows);
    std::vector<Choice> out;
    for (const GpuPlanRow& r : rows) {
        if (!r.feasible) {
            if (closest_reason.empty()) closest_reason = r.reason;
            continue;
        }
        const GpuLayout& l = r.layout;
        Choice c{l.dp, l.tp, l.pp, l.schedule, l.virtual_stages, l.recompute == Recompute::full,
                 r.microbatches, {}, 0, 0};
        c.name = gpu_layout_name(l);
        c.step_s = r.time.step_s;
        c.memory_gib = r.memory.total / k_gib;
        out.push_back(c);
    }
    return out;
}

}  // namespace

std::vector<std::string> apply_auto_layout(Job& job, int world, int ranks_on_host) {
    if (!job.distribution.auto_layout) return {};
    ModelConfig config = load_hf_config(job.model.config_path);
    const Task want = job.task;
    if (config.task != want) config_set_task(config, want);
    const PlanModel m = plan_model_from_config(config);
    const int64_t global = job.training.per_device_train_batch_size *
                           std::max<int64_t>(1, job.training.gradient_accumulation_steps) * world;
    std::string closest, machine;
    std::vector<std::string> why;
    std::vector<Choice> choices;
    if (job.distribution.machine.empty()) {
        choices = cpu_choices(m, job, world, ranks_on_host, global, closest);
        machine = fmt::format("this host's CPU ({} cores, {} rank(s) on it)",
                              std::max(1u, std::thread::hardware_concurrency()), ranks_on_host);
    } else {
        choices = gpu_choices(m, job, world, global, closest, why);
        machine = job.distribution.machine;
    }
    LOOM_CHECK(!choices.empty(),
               "{}: distribution.auto: no feasible layout of {} ranks for a global batch of {} "
               "on {}{}",
               job.source, world, global, machine, closest.empty() ? std::string() : fmt::format(" ({})", closest));
    const Choice& c = choices[0];
    apply(job, c, global);
    std::string zero_note;
    if (c.dp == 1 && job.distribution.zero_stage > 0) {
        zero_note = fmt::format("  zero_stage {} dropped: the chosen layout has one data-parallel "
                                "replica, nothing to shard",
                                job.distribution.zero_stage);
        job.distribution.zero_stage = 0;
    }
    std::vector<std::string> lines;
    lines.push_back(fmt::format(
        "distribution: auto on {} rank(s), global batch {} (per_device_train_batch_size x "
        "gradient_accumulation_steps x world), planned for {}",
        world, global, machine));
    lines.push_back(fmt::format("  chosen: {}: predicted step {:.4g} s, {:.4g} GiB per rank",
                                c.name, c.step_s, c.memory_gib));
    if (choices.size() > 1)
        lines.push_back(fmt::format("  runner-up: {}: predicted step {:.4g} s ({:+.1f}%)",
                                    choices[1].name, choices[1].step_s,
                                    100 * (choices[1].step_s / c.step_s - 1)));
    if (!zero_note.empty()) lines.push_back(zero_note);
    for (const std::string& w : why) lines.push_back(fmt::format("  {}", w));
    return lines;
}

}  // namespace loom
