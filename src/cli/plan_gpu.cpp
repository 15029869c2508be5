// `loom plan --machine`: reads the job (model config only), builds the
// cluster planner's job and prints the priced layouts as a table, JSON lines
// or an explanation. Output formats are documented in docs/plan-gpu.md.
#include "cli/plan_gpu.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "config/job.h"
#include "core/check.h"
#include "models/model_config.h"
#include "train/plan_model.h"

namespace loom::cli {

namespace {

constexpr double k_gib = double(1 << 30);

nlohmann::json row_json(const GpuPlanRow& r, const GpuJob& job) {
    const GpuLayout& l = r.layout;
    const GpuMemory& m = r.memory;
    const GpuTime& t = r.time;
    nlohmann::json j;
    j["machine"] = job.machine.name;
    j["nodes"] = job.nodes;
    j["dp"] = l.dp;
    j["tp"] = l.tp;
    j["pp"] = l.pp;
    j["schedule"] = l.pp > 1 ? std::string(schedule_kind_name(l.schedule)) : "none";
    j["virtual_stages"] = l.pp > 1 && l.schedule == ScheduleKind::interleaved ? l.virtual_stages : 1;
    j["micro_batch"] = l.micro_batch;
    j["global_batch"] = l.global_batch;
    j["microbatches"] = r.microbatches;
    j["recompute"] = std::string(recompute_name(l.recompute));
    j["sequence_parallel"] = l.sequence_parallel;
    j["zero_stage"] = l.zero_stage;
    j["precision"] = l.precision;
    j["attention"] = l.fused_attention ? "fused" : "unfused";
    j["feasible"] = r.feasible;
    j["reason"] = r.reason;
    // The model as priced: exact parameter count and forward FLOPs per token
    // (layer_flops_per_token over the layers plus the output layer).
    const PlanModel& pm = job.model;
    j["model"] = {
        {"params", pm.total_params},
        {"layers", pm.layers},
        {"hidden", pm.hidden},
        {"heads", pm.heads},
        {"kv_heads", pm.kv()},
        {"intermediate", pm.intermediate},
        {"vocab", pm.vocab},
        {"gated_mlp", pm.gated_mlp},
        {"window", pm.window},
        {"forward_flops_per_token", gpu_model_flops(pm, job.seq, 1) / 3 / double(job.seq)}};
    if (r.microbatches > 0) {  // priced (possibly over memory)
        j["step_s"] = t.step_s;
        j["tokens_per_s"] = r.tokens_per_s;
        j["tflops_per_gpu_model"] = r.tflops_model;
        j["tflops_per_gpu_hardware"] = r.tflops_hardware;
        j["mfu"] = r.mfu;
        j["hfu"] = r.hfu;
        j["memory_gib_per_gpu"] = m.total / k_gib;
        j["memory_gib"] = {{"weights", m.weights / k_gib},
                           {"grads", m.grads / k_gib},
                           {"optimizer", m.optimizer / k_gib},
                           {"activations", m.activations / k_gib},
                           {"logits", m.logits / k_gib},
                           {"reserved", m.reserved / k_gib},
                           {"allocator_margin", m.allocator / k_gib},
                           {"stage", m.first_stage ? "first" : "last"},
                           {"layer_activation_per_micro_batch", m.layer_activation / k_gib},
                           {"in_flight", m.in_flight}};
        j["time_s"] = {{"gemm", t.gemm_s},           {"memory_bound", t.memory_bound_s},
                       {"tp_comm", t.tp_comm_s},     {"pp_comm", t.pp_comm_s},
                       {"bubble_share", t.bubble},   {"dp_comm", t.dp_comm_s},
                       {"dp_exposed", t.dp_exposed_s}, {"optimizer", t.optimizer_s}};
    }
    return j;
}

void print_table(const std::vector<GpuPlanRow>& rows, const GpuPlanOptions& o) {
    // TF model / hw: TFLOP/s per GPU on model FLOPs and with the recompute;
    // memory: total = state (weights, grads, optimizer) + acts + logits +
    // reserved and allocator margin.
    fmt::print("{:<48} {:>9} {:>9} {:>8} {:>8} {:>6} {:>8} {:>7} {:>7} {:>7} {:>7}\n", "layout",
               "step s", "tok/s", "TF model", "TF hw", "MFU", "mem GiB", "state", "acts",
               "logits", "bubble");
    int shown = 0;
    for (const GpuPlanRow& r : rows) {
        if (!r.feasible && !o.all) continue;
        if (o.top > 0 && shown >= o.top) break;
        ++shown;
        if (r.microbatches == 0) {
            fmt::print("{:<48} not feasible: {}\n", gpu_layout_name(r.layout), r.reason);
            continue;
        }
        const GpuMemory& m = r.memory;
        fmt::print(
            "{:<48} {:>9.4g} {:>9.0f} {:>8.1f} {:>8.1f} {:>5.1f}% {:>8.1f} {:>7.1f} {:>7.1f} "
            "{:>7.1f} {:>6.1f}%\n",
            gpu_layout_name(r.layout), r.time.step_s, r.tokens_per_s, r.tflops_model,
            r.tflops_hardware, 100 * r.mfu, m.total / k_gib,
            (m.weights + m.grads + m.optimizer) / k_gib, m.activations / k_gib, m.logits / k_gib,
            100 * r.time.bubble);
        if (!r.feasible) fmt::print("{:<48} not feasible: {}\n", "", r.reason);
    }
    if (shown == 0) fmt::print("no feasible layout (--all lists the reasons)\n");
}

}  // namespace

void run_gpu_plan(const std::string& job_path, const std::vector<std::string>& overrides,
                  const GpuPlanOptions& o) {
    JobParseOptions po;
    po.model_config_only = true;
    const Job job = job_load(job_path, overrides, po);
    ModelConfig config = load_hf_config(job.model.config_path);
    const Task want = job.task;
    if (config.task != want) config_set_task(config, want);

    GpuJob g;
    g.model = plan_model_from_config(config);
    g.seq = job.data.max_seq_length;
    g.nodes = o.nodes;
    g.machine = gpu_profile_resolve(o.machine);
    LOOM_CHECK(o.nodes >= 1, "--nodes: expected at least 1, got {}", o.nodes);

    const DistributionArgs& d = job.distribution;
    // The job's global batch: per-device rows x accumulation steps x dp.
    const int64_t job_dp = std::max<int64_t>(1, d.data_parallel_degree);
    int64_t global = o.global_batch;
    if (global <= 0)
        global = job.training.per_device_train_batch_size * job_dp *
                 std::max<int64_t>({1, job.training.gradient_accumulation_steps});
    GpuLayout base;
    base.global_batch = global;
    base.zero_stage = int(d.zero_stage);
    base.recompute = d.activation_checkpointing ? Recompute::full : Recompute::none;
    base.precision = job.training.fp16 ? "fp16" : o.bounds.precision;
    base.fused_attention = o.bounds.fused_attention;

    std::vector<GpuPlanRow> rows;
    if (!o.layout.empty()) {
        rows.push_back(gpu_plan_price(g, parse_gpu_layout(o.layout, base)));
    } else {
        GpuSearchBounds b = o.bounds;
        b.zero_stage = base.zero_stage;
        b.precision = base.precision;
        rows = gpu_plan_search(g, global, b);
    }
    if (o.json) {
        for (const GpuPlanRow& r : rows) {
            if (!r.feasible && !o.all && o.layout.empty()) continue;
            fmt::print("{}\n", row_json(r, g).dump());
        }
        return;
    }
    const PlanModel& m = g.model;
    fmt::print(
        "{}: {:.2f}B parameters ({}), {} layers, hidden {}, {} heads{}, vocab {}; global batch {} "
        "x seq {}\nmachine {}: {}; {} node(s), {} GPUs\n\n",
        config.architecture, double(m.total_params) / 1e9, m.total_params, m.layers, m.hidden,
        m.heads, m.kv() != m.heads ? fmt::format(" ({} key/value)", m.kv()) : std::string(),
        m.vocab, rows.empty() ? global : rows[0].layout.global_batch, g.seq, g.machine.name,
        g.machine.description, g.nodes, g.world());
    GpuPlanOptions shown = o;
    if (!o.layout.empty()) shown.all = true;  // a given layout is shown with its reason
    print_table(rows, shown);
    if (o.explain) {
        fmt::print("\n");
        for (const std::string& line : gpu_plan_explain(rows)) fmt::print("{}\n", line);
    }
}

}  // namespace loom::cli
