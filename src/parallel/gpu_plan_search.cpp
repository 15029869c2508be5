// Layout strings, the feasibility rules, pricing of one layout and the
// search over all layouts of a world (gpu_plan.h). The search holds the
// global batch fixed and tries every tp x pp x dp split, micro-batch size,
// schedule (1F1B, interleaved with 2-4 chunks), recompute mode and
// sequence parallelism; it never changes the model or the batch.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "parallel/gpu_plan.h"

namespace loom {

namespace {

constexpr double k_gib = double(1 << 30);

int to_int(const std::string& key, const std::string& v) {
    try {
        size_t used = 0;
        const long long x = std::stoll(v, &used);
        if (used == v.size() && x >= 0 && x < (1LL << 31)) return int(x);
    } catch (const std::exception&) {
    }
    LOOM_FAIL("--layout: {}={}: expected a non-negative integer", key, v);
}

bool to_bool(const std::string& key, const std::string& v) {
    if (v == "true" || v == "1" || v == "yes") return true;
    if (v == "false" || v == "0" || v == "no") return false;
    LOOM_FAIL("--layout: {}={}: expected true or false", key, v);
}

}  // namespace

std::string_view recompute_name(Recompute r) {
    switch (r) {
        case Recompute::none: return "none";
        case Recompute::selective: return "selective";
        case Recompute::full: return "full";
    }
    return "none";
}

Recompute recompute_from_name(std::string_view name) {
    if (name == "none") return Recompute::none;
    if (name == "selective") return Recompute::selective;
    if (name == "full") return Recompute::full;
    LOOM_FAIL("recompute '{}': expected none, selective or full", name);
}

GpuLayout parse_gpu_layout(const std::string& text, GpuLayout l) {
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find(',', pos);
        if (end == std::string::npos) end = text.size();
        const std::string item = text.substr(pos, end - pos);
        pos = end + 1;
        if (item.empty()) continue;
        const size_t eq = item.find('=');
        LOOM_CHECK(eq != std::string::npos, "--layout: '{}': expected key=value", item);
        const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
        if (k == "dp") l.dp = to_int(k, v);
        else if (k == "tp") l.tp = to_int(k, v);
        else if (k == "pp") l.pp = to_int(k, v);
        else if (k == "micro_batch") l.micro_batch = to_int(k, v);
        else if (k == "global_batch") l.global_batch = to_int(k, v);
        else if (k == "virtual_stages") l.virtual_stages = to_int(k, v);
        else if (k == "zero_stage") l.zero_stage = to_int(k, v);
        else if (k == "recompute") l.recompute = recompute_from_name(v);
        else if (k == "sequence_parallel") l.sequence_parallel = to_bool(k, v);
        else if (k == "schedule") l.schedule = schedule_kind_from_name(v);
        else if (k == "precision") {
            LOOM_CHECK(v == "bf16" || v == "fp16" || v == "tf32" || v == "fp32",
                       "--layout: precision={}: expected bf16, fp16, tf32 or fp32", v);
            l.precision = v;
        } else if (k == "attention") {
            LOOM_CHECK(v == "fused" || v == "unfused",
                       "--layout: attention={}: expected fused or unfused", v);
            l.fused_attention = v == "fused";
        } else {
            LOOM_FAIL("--layout: unknown key '{}' (expected dp, tp, pp, micro_batch, global_batch, "
                      "schedule, virtual_stages, recompute, sequence_parallel, zero_stage, "
                      "precision, attention)",
                      k);
        }
    }
    // virtual_stages > 1 means the interleaved schedule.
    if (l.virtual_stages > 1) l.schedule = ScheduleKind::interleaved;
    return l;
}

std::string gpu_layout_name(const GpuLayout& l) {
    std::string s = fmt::format("dp{} tp{} pp{} mb{}", l.dp, l.tp, l.pp, l.micro_batch);
    if (l.pp > 1) {
        s += fmt::format(" {}", schedule_kind_name(l.schedule));
        if (l.schedule == ScheduleKind::interleaved) s += fmt::format("x{}", l.virtual_stages);
    }
    if (l.recompute != Recompute::none) s += fmt::format(" rc-{}", recompute_name(l.recompute));
    if (l.sequence_parallel) s += " sp";
    if (l.zero_stage) s += fmt::format(" zero{}", l.zero_stage);
    return s;
}

std::string gpu_layout_check(const GpuJob& job, const GpuLayout& l) {
    const PlanModel& m = job.model;
    if (l.dp < 1 || l.tp < 1 || l.pp < 1 || l.micro_batch < 1)
        return "dp, tp, pp and micro_batch must be at least 1";
    if (l.dp * l.tp * l.pp != job.world())
        return fmt::format("dp x tp x pp = {} but the job has {} GPUs ({} nodes of {})",
                           l.dp * l.tp * l.pp, job.world(), job.nodes,
                           job.machine.gpus_per_node);
    if (l.global_batch < 1) return "global_batch must be given";
    if (l.global_batch % (int64_t(l.dp) * l.micro_batch))
        return fmt::format("global batch {} not divisible by dp x micro_batch = {}",
                           l.global_batch, int64_t(l.dp) * l.micro_batch);
    if (m.heads % l.tp)
        return fmt::format("attention heads ({}) not divisible by tp {}", m.heads, l.tp);
    // Loom splits the key/value heads alike, so each rank keeps whole query groups.
    if (m.kv() % l.tp)
        return fmt::format(
            "key/value heads ({}) not divisible by tp {} (each rank keeps whole query groups)",
            m.kv(), l.tp);
    if (m.intermediate % l.tp)
        return fmt::format("intermediate size ({}) not divisible by tp {}", m.intermediate, l.tp);
    if (l.zero_stage < 0 || l.zero_stage > 2) return "zero_stage must be 0, 1 or 2";
    if (l.sequence_parallel && l.tp == 1) return "sequence_parallel needs tp > 1";
    const int v = l.pp > 1 && l.schedule == ScheduleKind::interleaved ? l.virtual_stages : 1;
    if (int64_t(l.pp) * v > m.layers)
        return fmt::format("{} pipeline stages x {} chunks but only {} layers", l.pp, v,
                           m.layers);
    if (l.pp > 1) {
        const int64_t micro = l.global_batch / (int64_t(l.dp) * l.micro_batch);
        const std::string why = schedule_check(l.schedule, l.pp, int(micro), v);
        if (!why.empty()) return fmt::format("{} micro-batches per replica: {}", micro, why);
    }
    const double peak = gpu_peak_tflops(job.machine, l.precision);
    if (peak <= 0) return fmt::format("the machine has no {} peak", l.precision);
    return "";
}

GpuPlanRow gpu_plan_price(const GpuJob& job, const GpuLayout& l) {
    GpuPlanRow r;
    r.layout = l;
    r.reason = gpu_layout_check(job, l);
    if (!r.reason.empty()) return r;
    r.microbatches = l.global_batch / (int64_t(l.dp) * l.micro_batch);
    r.memory = gpu_plan_memory(job, l);
    const double cap = job.machine.hbm_gib * k_gib;
    r.time = gpu_plan_time(job, l, r.memory.total <= cap);
    const double world = double(job.world()), step = r.time.step_s;
    r.tokens_per_s = double(l.global_batch * job.seq) / step;
    r.tflops_model = gpu_model_flops(job.model, job.seq, l.global_batch) / step / world / 1e12;
    r.tflops_hardware =
        gpu_hardware_flops(job.model, job.seq, l.global_batch, l) / step / world / 1e12;
    const double peak = gpu_peak_tflops(job.machine, l.precision);
    r.mfu = r.tflops_model / peak;
    r.hfu = r.tflops_hardware / peak;
    if (r.memory.total > cap) {
        const GpuMemory& m = r.memory;
        r.reason = fmt::format(
            "needs {:.4g} GiB per GPU on the {} stage (model state {:.4g}, activations {:.4g}, "
            "logits {:.4g}, reserved and margin {:.4g}), over the {:.4g} GiB of {}",
            m.total / k_gib, m.first_stage ? "first" : "last",
            (m.weights + m.grads + m.optimizer) / k_gib, m.activations / k_gib,
            m.logits / k_gib, (m.reserved + m.allocator) / k_gib, job.machine.hbm_gib,
            job.machine.name);
        return r;
    }
    r.feasible = true;
    return r;
}

std::vector<GpuPlanRow> gpu_plan_search(const GpuJob& job, int64_t global_batch,
                                        const GpuSearchBounds& bounds) {
    std::vector<GpuPlanRow> rows;
    const int world = job.world();
    const int max_tp = bounds.max_tp > 0 ? bounds.max_tp : world;
    const int max_pp = bounds.max_pp > 0 ? bounds.max_pp : world;
    for (int tp = 1; tp <= std::min(world, max_tp); ++tp) {
        if (world % tp || job.model.heads % tp || job.model.kv() % tp) continue;
        for (int pp = 1; pp <= std::min(world / tp, max_pp); ++pp) {
            if ((world / tp) % pp || pp > job.model.layers) continue;
            const int dp = world / tp / pp;
            if (global_batch % dp) continue;
            std::vector<int64_t> micro_batches;
            if (bounds.micro_batch > 0)
                micro_batches.push_back(bounds.micro_batch);
            else
                for (int64_t mb = 1; mb <= global_batch / dp && mb <= 64; mb *= 2)
                    micro_batches.push_back(mb);
            std::vector<std::pair<ScheduleKind, int>> schedules{{ScheduleKind::one_f_one_b, 1}};
            if (pp > 1)
                for (int v = 2; v <= 4; ++v)
                    if (job.model.layers % (int64_t(pp) * v) == 0)
                        schedules.push_back({ScheduleKind::interleaved, v});
            for (int64_t mb : micro_batches)
                for (auto [kind, v] : schedules)
                    for (Recompute rc : bounds.recompute)
                        for (bool sp : {false, true}) {
                            if (sp && (tp == 1 || !bounds.sequence_parallel)) continue;
                            GpuLayout l;
                            l.dp = dp, l.tp = tp, l.pp = pp, l.micro_batch = mb;
                            l.global_batch = global_batch;
                            l.schedule = kind, l.virtual_stages = v;
                            l.recompute = rc, l.sequence_parallel = sp;
                            l.zero_stage = dp > 1 ? bounds.zero_stage : 0;
                            l.precision = bounds.precision;
                            l.fused_attention = bounds.fused_attention;
                            rows.push_back(gpu_plan_price(job, l));
                        }
        }
    }
    std::stable_sort(rows.begin(), rows.end(), [](const GpuPlanRow& a, const GpuPlanRow& b) {
        if (a.feasible != b.feasible) return a.feasible;
        const double ta = a.time.step_s > 0 ? a.time.step_s : 1e300;
        const double tb = b.time.step_s > 0 ? b.time.step_s : 1e300;
        return ta < tb;
    });
    return rows;
}

std::vector<std::string> gpu_plan_explain(const std::vector<GpuPlanRow>& rows) {
    std::vector<std::string> out;
    auto parts = [](const GpuPlanRow& r) {
        const GpuTime& t = r.time;
        return fmt::format(
            "GEMM {:.4g} s, memory-bound {:.4g} s, TP comm {:.4g} s, PP comm {:.4g} s, bubble "
            "{:.1f}%, DP exposed {:.4g} s of {:.4g} s, optimizer {:.4g} s; {:.4g} GiB per GPU",
            t.gemm_s, t.memory_bound_s, t.tp_comm_s, t.pp_comm_s, 100 * t.bubble,
            t.dp_exposed_s, t.dp_comm_s, t.optimizer_s, r.memory.total / k_gib);
    };
    const GpuPlanRow* win = rows.empty() || !rows[0].feasible ? nullptr : &rows[0];
    if (!win) {
        out.push_back("no feasible layout");
        return out;
    }
    out.push_back(fmt::format("winner {}: step {:.4g} s ({})", gpu_layout_name(win->layout),
                              win->time.step_s, parts(*win)));
    if (rows.size() > 1 && rows[1].feasible) {
        const GpuPlanRow& ru = rows[1];
        const GpuTime &a = win->time, &b = ru.time;
        // The components where the runner-up loses most, largest first.
        std::vector<std::pair<double, std::string>> d = {
            {b.gemm_s - a.gemm_s, "GEMM time"},
            {b.memory_bound_s - a.memory_bound_s, "memory-bound kernels"},
            {b.tp_comm_s - a.tp_comm_s, "tensor-parallel communication"},
            {b.pp_comm_s - a.pp_comm_s, "pipeline sends"},
            {b.step_s * b.bubble - a.step_s * a.bubble, "pipeline bubble"},
            {b.dp_exposed_s - a.dp_exposed_s, "exposed gradient reduction"},
            {b.optimizer_s - a.optimizer_s, "optimizer step"}};
        std::sort(d.begin(), d.end(), [](auto& x, auto& y) { return x.first > y.first; });
        std::string why;
        for (const auto& [ds, what] : d)
            if (ds > 0.005 * a.step_s)
                why += fmt::format("{}{} +{:.4g} s", why.empty() ? "" : ", ", what, ds);
        out.push_back(fmt::format("runner-up {}: step {:.4g} s, {:.1f}% slower ({})",
                                  gpu_layout_name(ru.layout), b.step_s,
                                  100 * (b.step_s / a.step_s - 1),
                                  why.empty() ? "within 0.5% in every part" : why));
    }
    // The fastest layout memory ruled out, when it would have won.
    for (const GpuPlanRow& r : rows)
        if (!r.feasible && r.time.step_s > 0 && r.time.step_s < win->time.step_s) {
            out.push_back(fmt::format("faster but infeasible {}: step {:.4g} s, {}",
                                      gpu_layout_name(r.layout), r.time.step_s, r.reason));
            break;
        }
    return out;
}

}  // namespace loom
