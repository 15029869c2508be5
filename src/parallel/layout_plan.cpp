// Layout planning: the memory and time formulas of docs/cost-model.md.
#include "parallel/layout_plan.h"

#include <algorithm>
#include <cmath>

#include "parallel/pipeline_parallel.h"
#include "parallel/pipeline_sim.h"

namespace loom {

namespace {

constexpr double k_f32 = 4.0;

int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

}  // namespace

// Linear weights and biases of one block. Column-parallel (split): q, k, v
// and the MLP's first matrices with their biases, and the row-parallel
// weights; replicated: the row-parallel biases (added after the all-reduce)
// and the norms. k and v have NKV heads (grouped-query attention); SwiGLU has
// gate and up of C x I and down of I x C.
PlanParams plan_block_params(const PlanModel& m) {
    const double C = double(m.hidden), I = double(m.intermediate), KV = double(m.kv_width());
    const double mlp_in = m.gated_mlp ? 2 * I : I;  // gate|up, or the one up-projection
    PlanParams p;
    p.split = 2 * C * C + 2 * C * KV + C * mlp_in + I * C;
    if (m.qkv_bias) p.split += C + 2 * KV;
    if (m.mlp_bias) p.split += mlp_in;
    if (m.out_bias) p.replicated += C;
    if (m.mlp_bias) p.replicated += C;
    p.replicated += (m.rms_norm ? 2 : 4) * C;  // two norms: weight (and bias)
    return p;
}

// Embedding rows (vocab-parallel word table; positions and types replicated).
PlanParams plan_embedding_params(const PlanModel& m) {
    const double E = double(m.embedding), C = double(m.hidden);
    const double positions = m.rotary ? 0 : double(m.positions);
    PlanParams p{double(m.vocab) * E, (positions + double(m.type_vocab)) * E};
    if (!m.rms_norm) p.replicated += 2 * E;                  // embedding LayerNorm
    if (m.embedding != m.hidden) p.replicated += E * C + C;  // ALBERT's projection
    return p;
}

// Head rows beyond the tied decoder weight.
PlanParams plan_head_params(const PlanModel& m) {
    const double C = double(m.hidden), V = double(m.vocab);
    const double final_norm = m.rms_norm ? C : 2 * C;
    // GPT-2's ln_f and tied wte; the Llama family's norm and, untied, its
    // own lm_head (vocabulary-parallel like the word table).
    if (m.causal) return {m.tied_head ? 0 : V * C, final_norm};
    if (m.score_head) return {0, final_norm + C * double(m.num_labels)};
    const double E = double(m.embedding);
    if (m.lm_head) return {V, C * E + E + 2 * E};  // decoder bias; transform to E + LayerNorm
    if (m.span_head) return {0, 2 * C + 2};        // qa_outputs
    return {0, C * C + C + C * double(m.num_labels) + double(m.num_labels)};  // pooler + classifier
}

double plan_attention_keys(const PlanModel& m, int64_t seq) {
    const double s = double(seq);
    return m.window >= 0 ? std::min(s, double(m.window) + 1) : s;
}

double layer_flops_per_token(const PlanModel& m, int64_t seq) {
    const double C = double(m.hidden), I = double(m.intermediate), KV = double(m.kv_width());
    const double mlp = (m.gated_mlp ? 3 : 2) * C * I;
    return 2 * (2 * C * C + 2 * C * KV + mlp) + 4 * plan_attention_keys(m, seq) * C;
}

double block_narrow_factor(const PlanModel& m, int64_t seq, int tp, double half_narrow) {
    if (half_narrow <= 0) return 1.0;
    const double C = double(m.hidden), I = double(m.intermediate), KV = double(m.kv_width());
    const double t = double(tp);
    auto rate = [&](double d) { return d / (d + half_narrow) * (1024 + half_narrow) / 1024; };
    // (input, output) widths of q|k|v, the attention output, the MLP's up
    // (and gate) and down projections on one tp rank.
    const double w[4][2] = {
        {C, (C + 2 * KV) / t}, {C / t, C}, {C, (m.gated_mlp ? 2 : 1) * I / t}, {I / t, C}};
    double linear = 0, linear_time = 0;
    for (const auto& [in, out] : w) {
        linear += in * out;
        linear_time += in * out / rate(std::min(in, out));
    }
    const double attention = 2 * plan_attention_keys(m, seq) * C / t;  // per 2 FLOPs
    return (linear_time + attention) / (linear + attention);
}

namespace {

// What the first and last stages add, in block applications: the runtime's
// pipeline_stage_extras from the plan's model.
StageExtras plan_stage_extras(const PlanModel& m, int64_t seq) {
    const double C = double(m.hidden), V = double(m.vocab), E = double(m.embedding);
    const double layer = layer_flops_per_token(m, seq);
    StageExtras x;
    if (m.embedding != m.hidden) x.first = 2 * E * C / layer;
    if (m.causal)
        x.last = 2 * C * V / layer;
    else if (m.lm_head)
        x.last = m.labelled_share * 2 * (C * E + E * V) / layer;
    return x;
}

// The runtime's default split (balanced_partition over pp x virtual stages;
// rank r runs stages c * pp + r) seen from the busiest ranks: the most block
// applications a rank holds (memory) and the largest cost in block
// applications, extras included (time). With a heavy head they are different
// ranks: GPT-2's [4, 4, 3, 1] keeps 4 layers' activations on the first stages
// and the most work on the last.
struct RankLoad {
    int64_t apps = 0;
    double units = 0;  // forward + backward (3 forwards) + recomputed blocks, in block forwards
};
// Each global stage's work per micro-batch, in block forwards: forward, and
// backward (2 x forward plus the checkpointed blocks' recompute).
struct StageWork {
    int64_t apps = 0;
    double forward = 0, backward = 0;
};
std::vector<StageWork> stage_work(const PlanModel& m, int64_t seq, const LayoutChoice& l,
                                  double block = 1.0) {
    const int V = l.schedule == ScheduleKind::interleaved ? std::max(1, l.virtual_stages) : 1;
    const int S = l.pp * V;
    const StageExtras x = plan_stage_extras(m, seq);
    const std::vector<int64_t> sizes =
        m.layers >= S ? balanced_partition(m.layers, S, x) : std::vector<int64_t>(size_t(S), 1);
    const int64_t every = std::max(1, l.checkpoint_every);
    std::vector<StageWork> out(static_cast<size_t>(S));
    for (int s = 0; s < S; ++s) {
        const int64_t n = sizes[size_t(s)];
        StageWork& w = out[size_t(s)];
        w.apps = n;
        w.forward = block * double(n) + (s == 0 ? x.first : 0) + (s == S - 1 ? x.last : 0);
        w.backward = 2 * w.forward + (l.checkpointing ? block * double(ceil_div(n, every)) : 0);
    }
    return out;
}

RankLoad busiest_rank(const PlanModel& m, int64_t seq, const LayoutChoice& l, double block = 1.0) {
    const std::vector<StageWork> stages = stage_work(m, seq, l, block);
    RankLoad worst;
    for (int r = 0; r < l.pp; ++r) {
        RankLoad load;
        for (size_t s = size_t(r); s < stages.size(); s += size_t(l.pp)) {
            load.apps += stages[s].apps;
            load.units += stages[s].forward + stages[s].backward;
        }
        worst.apps = std::max(worst.apps, load.apps);
        worst.units = std::max(worst.units, load.units);
    }
    return worst;
}

// The pipeline's makespan when the node's ranks share `cores` cores: every
// rank of the node that has work runs at min(1, cores / busy ranks) of its
// speed (the kernel's fair share), so the schedule keeps its order and its
// time stretches by busy / cores wherever more ranks than cores are busy.
// `copies`: the node's ranks per pipeline rank (dp x tp replicas of the same
// schedule run in step, times the threads each runs). In block forwards.
double shared_core_makespan(const PlanModel& m, int64_t seq, const LayoutChoice& l, int micro,
                            double copies, int cores, double block) {
    const std::vector<StageWork> stages = stage_work(m, seq, l, block);
    constexpr double k_ticks = 1000;  // per block forward: the simulation counts in integers
    SimOptions so;
    for (const StageWork& w : stages) {
        so.stage_forward_time.push_back(std::max<int64_t>(1, std::llround(k_ticks * w.forward)));
        so.stage_backward_time.push_back(std::max<int64_t>(1, std::llround(k_ticks * w.backward)));
    }
    const SimResult sim = simulate_schedule(l.schedule, l.pp, micro, int(stages.size()) / l.pp, so);
    if (!sim.ok) return 0;
    std::vector<std::pair<int64_t, int>> edges;  // (time, +1 start / -1 end)
    for (const auto& rank : sim.spans)
        for (const ComputeSpan& c : rank) {
            edges.emplace_back(c.start, 1);
            edges.emplace_back(c.end, -1);
        }
    std::sort(edges.begin(), edges.end());
    double total = 0;
    int busy = 0;
    for (size_t i = 0; i + 1 < edges.size(); ++i) {
        busy += edges[i].second;
        const double dt = double(edges[i + 1].first - edges[i].first);
        total += dt * std::max(1.0, double(busy) * copies / double(cores));
    }
    return total / k_ticks;
}

// Blocks the busiest stage holds and runs.
int64_t stage_applications(const PlanModel& m, const PlanWorkload& w, const LayoutChoice& l) {
    return l.pp == 1 ? m.layers : busiest_rank(m, w.seq, l).apps;
}
int64_t stage_blocks(const PlanModel& m, const PlanWorkload& w, const LayoutChoice& l) {
    // ALBERT's shared group lives on every stage; BERT's blocks are split.
    if (m.distinct_blocks < m.layers) return m.distinct_blocks;
    return stage_applications(m, w, l);
}

// Floats one block application saves for backward (per micro-batch), and
// the part of it that is the block's output (kept even when checkpointed).
struct ActFloats {
    double output = 0, internal = 0;
};
ActFloats block_acts(const PlanModel& m, const PlanWorkload& w, int tp) {
    const double N = double(w.micro_batch * w.seq), C = double(m.hidden),
                 I = double(m.intermediate);
    const double att = double(w.micro_batch) * double(m.heads / tp) * double(w.seq) * double(w.seq);
    // q|k|v (C + 2 NKV d)/tp and, with grouped-query attention, k and v
    // expanded to NH heads (the 3C/tp rows attention reads, nn/self_attention.h);
    // context (C/tp); MLP pre- and post-activation (2I/tp; SwiGLU: gate|up 2I
    // and silu(gate) x up I); the norm output, residual sum and second norm
    // input (3C); norm statistics (4); attention probabilities.
    const double qkv = C + 2 * double(m.kv_width()) + (m.kv() != m.heads ? 3 * C : 0);
    const double mlp = m.gated_mlp ? 3 * I : 2 * I;
    return {N * C, N * ((qkv + C + mlp) / tp + 3 * C + 4) + att};
}

// Backward workspace shared by every block, plus embeddings and head buffers
// (what the models' arena plans take).
double workspace_floats(const PlanModel& m, const PlanWorkload& w, const LayoutChoice& l,
                        bool first_stage, bool last_stage) {
    const double N = double(w.micro_batch * w.seq), C = double(m.hidden),
                 I = double(m.intermediate);
    const double E = double(m.embedding);
    const double att =
        double(w.micro_batch) * double(m.heads / l.tp) * double(w.seq) * double(w.seq);
    // dqkv (and its expansion under GQA), dctx, dI (SwiGLU: d gate|up and d of
    // the product), t, u, dh, du; datt.
    const double dqkv = C + 2 * double(m.kv_width()) + (m.kv() != m.heads ? 3 * C : 0);
    const double dI = m.gated_mlp ? 3 * I : I;
    double f = N * ((dqkv + C + dI) / l.tp + 4 * C) + att;
    if (first_stage) {
        f += N * C + 2 * N;  // hidden[0]
        // The embedding sum and its gradient (the Llama family embeds into hidden[0]).
        if (!m.rms_norm) f += 2 * N * E;
        if (m.embedding != m.hidden) f += 2 * N * E;  // ALBERT's projection input and gradient
    }
    if (last_stage) {
        const double V = double(m.vocab) / l.tp;
        if (m.causal)
            f += N * C + 2 * N + 2 * N * V;  // final norm output; logits and their gradient
        else if (m.lm_head)
            // The arena holds every position's logits (the labelled share varies
            // per batch); transform, GELU and LayerNorm buffers and gradients.
            f += N * (2 * C + 5 * E + 2 + 2 * V);
        else if (m.score_head)
            f += N * (C + 2);  // final norm output and statistics (the score is per row)
        else
            f += N * (C + 6);  // QA span head (classification's is per row: negligible)
    }
    return f;
}

double ring_seconds(double bytes, int n, double gbps, double latency) {
    if (n <= 1 || bytes <= 0) return 0;
    return 2.0 * double(n - 1) / double(n) * bytes / (gbps * 1e9) + 2.0 * double(n - 1) * latency;
}

}  // namespace

void plan_model_count_params(PlanModel& m) {
    const PlanParams b = plan_block_params(m), e = plan_embedding_params(m),
                     h = plan_head_params(m);
    m.total_params = int64_t(double(m.distinct_blocks) * (b.split + b.replicated) + e.split +
                             e.replicated + h.split + h.replicated);
}

double forward_flops_per_token(const PlanModel& m, int64_t seq) {
    const double C = double(m.hidden), V = double(m.vocab);
    double f = double(m.layers) * layer_flops_per_token(m, seq);
    if (m.embedding != m.hidden) f += 2 * double(m.embedding) * C;
    if (m.causal)
        f += 2 * C * V;
    else if (m.lm_head)
        f += m.labelled_share * 2 * (C * C + C * V);
    return f;
}

PlanWorkload split_workload(int64_t global_batch, int64_t seq, int64_t microbatches, int dp) {
    PlanWorkload w;
    w.seq = seq;
    w.microbatches = std::max<int64_t>(1, microbatches);
    const int64_t parts = int64_t(dp) * w.microbatches;
    w.micro_batch = global_batch % parts == 0 ? global_batch / parts : 0;
    return w;
}

std::string layout_check(const PlanModel& m, const PlanWorkload& w, const LayoutChoice& l) {
    if (l.dp < 1 || l.tp < 1 || l.pp < 1) return "degrees must be at least 1";
    if (w.micro_batch < 1) return "global batch not divisible by dp x micro-batches";
    if (m.heads % l.tp)
        return "attention heads (" + std::to_string(m.heads) + ") not divisible by tp";
    // Loom splits the key/value heads alike, so each rank keeps whole query groups.
    if (m.kv() % l.tp)
        return "key/value heads (" + std::to_string(m.kv()) +
               ") not divisible by tp (each rank keeps whole query groups)";
    if (m.intermediate % l.tp) return "intermediate size not divisible by tp";
    if (l.pp * l.virtual_stages > m.layers) return "more pipeline stages than layers";
    if (l.pp > 1 && w.microbatches < l.pp && l.schedule != ScheduleKind::simple)
        return "fewer micro-batches than pipeline stages";
    if (l.schedule == ScheduleKind::interleaved && l.virtual_stages > 1 && w.microbatches % l.pp)
        return "interleaved needs micro-batches divisible by pp";
    return "";
}

MemoryPlan plan_memory(const PlanModel& m, const PlanWorkload& w, const LayoutChoice& l) {
    MemoryPlan r;
    const PlanParams b = plan_block_params(m), e = plan_embedding_params(m),
                     h = plan_head_params(m);
    const double blocks = double(stage_blocks(m, w, l));
    const double body = blocks * (b.split / l.tp + b.replicated);
    const double emb = e.split / l.tp + e.replicated, head = h.split / l.tp + h.replicated;
    // Busiest rank: the first stage (embeddings) or the last (head, and a copy
    // of the tied word embeddings when pp > 1).
    const double tied_copy =
        m.lm_head && m.tied_head && l.pp > 1 ? double(m.vocab) * double(m.embedding) / l.tp : 0;
    const double first = body + emb + (l.pp == 1 ? head : 0);
    const double last = body + head + tied_copy;
    const double P = std::max(first, last);
    const bool busiest_is_first = first >= last;
    r.params = k_f32 * P;
    r.grads = k_f32 * P;
    const double shard = k_f32 * P / l.dp;
    if (l.zero_stage == 0)
        r.optimizer = 2 * k_f32 * P;
    else {
        r.optimizer = 2 * shard;
        r.grads += (l.zero_stage == 2 ? 2 : 1) * shard;  // reduced shard (+ receive buffer)
    }

    const int64_t apps = stage_applications(m, w, l);
    const ActFloats a = block_acts(m, w, l.tp);
    double saved = double(apps) * (a.output + a.internal);
    if (l.checkpointing) {
        const int64_t every = std::max(1, l.checkpoint_every);
        const int64_t ckpt = ceil_div(apps, every);  // applications 0, k, 2k, ...
        // Checkpointed blocks keep only their output (the next block's input);
        // backward recomputes one block at a time into one block's buffers.
        saved -= double(ckpt) * a.internal;
        saved += a.internal;
    }
    r.activations_per_micro = k_f32 * saved;
    int in_flight = 1;
    if (l.pp > 1) {
        for (int s = 0; s < l.pp; ++s)
            in_flight = std::max(
                in_flight,
                schedule_max_in_flight(l.schedule, l.pp, s, int(w.microbatches), l.virtual_stages));
    }
    r.in_flight = in_flight;
    // Interleaved chunks hold 1/v of the stage's blocks each.
    const double chunk_share =
        l.schedule == ScheduleKind::interleaved ? 1.0 / l.virtual_stages : 1.0;
    r.activations_in_flight = r.activations_per_micro * in_flight * chunk_share;
    // The trainer builds one model instance per micro-batch in flight and
    // chunk, each with an arena of its own: its backward workspace and head
    // buffers are there once per instance.
    const double instances =
        l.pp > 1 ? double(in_flight) *
                       (l.schedule == ScheduleKind::interleaved ? l.virtual_stages : 1)
                 : 1.0;
    r.workspace = instances * k_f32 *
                  workspace_floats(m, w, l, busiest_is_first || l.pp == 1,
                                   !busiest_is_first || l.pp == 1);
    r.peak = r.params + r.grads + r.optimizer + r.activations_in_flight + r.workspace;
    return r;
}

TimePlan plan_time(const PlanModel& m, const PlanWorkload& w, const LayoutChoice& l,
                   const MachineModel& mc, int world) {
    TimePlan t;
    const double tokens = double(w.micro_batch * w.seq);
    const double fwd_tok = forward_flops_per_token(m, w.seq);
    // Work of one micro-batch on the busiest rank: its stages' blocks plus
    // the embeddings or head they hold (the runtime's balanced split), one
    // more forward of each checkpointed block, backward = 2 x forward; tp split.
    const double layer_tok = layer_flops_per_token(m, w.seq) * tokens / l.tp;
    // Blocks in block forwards at the rows' GEMM rate; narrow tp GEMMs run
    // slower, and norms and residuals run whole on every tp rank.
    const double block = block_narrow_factor(m, w.seq, l.tp, mc.gemm_half_narrow) *
                         block_replicated_factor(m, w.seq, l.tp, mc.step_efficiency);
    double fwd = fwd_tok * tokens / l.tp + double(m.layers) * (block - 1) * layer_tok;
    double per_micro = 3 * fwd;
    if (l.pp > 1) {
        per_micro = busiest_rank(m, w.seq, l, block).units * layer_tok;
        fwd = per_micro / 3;  // the schedule simulation's unit below
    } else if (l.checkpointing) {
        per_micro +=
            block * double(ceil_div(m.layers, std::max(1, l.checkpoint_every))) * layer_tok;
    }
    const int ranks_node = mc.ranks_per_node > 0 ? mc.ranks_per_node : world;
    // Each rank runs max(1, cores / ranks) threads.
    const double threads = std::max(1.0, double(mc.cores) / double(ranks_node));
    const double shape = mc.gemm_half_rows > 0 ? tokens / (tokens + mc.gemm_half_rows) : 1.0;
    // The node's ranks and threads fill its cores: each runs at the rate
    // measured with every core busy.
    const double core_rate =
        mc.gflops_per_core * 1e9 * shape * mc.step_efficiency * mc.all_cores_share;
    const double rank_rate = core_rate * threads;

    // Pipeline: the simulated schedule's idle share stretches the busy time.
    if (l.pp > 1) {
        SimOptions so;
        so.forward_time = 10;
        so.backward_time = int64_t(std::lround(10.0 * (per_micro - fwd) / fwd));
        const SimResult sim =
            simulate_schedule(l.schedule, l.pp, int(w.microbatches), l.virtual_stages, so);
        t.bubble = sim.ok ? sim.bubble : 0;
    }
    const double work = double(w.microbatches) * per_micro;  // FLOPs of one rank per step
    double compute = work / rank_rate / (1.0 - t.bubble);
    if (l.pp > 1) {
        // The schedule with each stage's own work, on the node's shared
        // cores: a rank waiting in a bubble frees its core for the others.
        const double copies = double(l.dp) * l.tp * threads * ranks_node / double(world);
        const double blocks =
            shared_core_makespan(m, w.seq, l, int(w.microbatches), copies, mc.cores, block);
        if (blocks > 0) compute = blocks * layer_tok / rank_rate;
    } else {
        // More ranks than cores: the node's total work over its cores.
        compute = std::max(compute, work * ranks_node / (core_rate * mc.cores));
    }
    t.compute_s = compute;

    const double act_bytes = k_f32 * tokens * double(m.hidden);
    const double apps = double(stage_applications(m, w, l));
    const double reduces = 4 + (l.checkpointing ? 2.0 / std::max(1, l.checkpoint_every) : 0);
    const double collectives = double(w.microbatches) * apps * reduces;
    // The collective's whole cost where it was measured at this node's rank
    // count; else its transfer, plus the shared-core wait scaled to the ranks.
    const double each = l.tp > 1 && ranks_node == mc.shared_sync_ranks
                            ? tp_collective_s(mc, l.tp, act_bytes)
                            : -1.0;
    if (each >= 0) {
        t.tp_comm_s = collectives * each;
    } else {
        t.tp_comm_s =
            collectives * ring_seconds(act_bytes, l.tp, allreduce_gbps_for(mc, l.tp), mc.latency_s);
        if (l.tp > 1 && ranks_node > mc.cores && mc.shared_sync_ranks > mc.cores) {
            const double per_core = double(ranks_node) / mc.cores - 1;
            const double measured_per_core = double(mc.shared_sync_ranks) / mc.cores - 1;
            t.tp_comm_s += collectives * shared_sync_for(mc, l.tp) * per_core / measured_per_core;
        }
    }
    if (l.pp > 1)
        t.pp_comm_s =
            double(w.microbatches) * 2 * (act_bytes / l.tp / (mc.p2p_gbps * 1e9) + mc.latency_s);
    const MemoryPlan mem = plan_memory(m, w, l);
    // Gradient reduction: the part not hidden behind backward (measured share
    // hidden on this machine: docs/cost-model.md). ZeRO moves the same bytes
    // as an all-reduce, but only its reduce-scatter runs beside backward: the
    // parameters' all-gather follows the optimizer step. With more ranks than
    // cores nothing hides: the reduction's copies and sums are CPU work of
    // their own, and every core already has a rank computing.
    const double hidden_share = ranks_node > mc.cores ? 0.0 : 0.4;
    const double exposed = l.zero_stage ? 0.5 * (1 - hidden_share) + 0.5 : 1 - hidden_share;
    const double dp_gbps = l.zero_stage ? zero_gbps_for(mc, l.dp) : allreduce_gbps_for(mc, l.dp);
    t.dp_comm_s = exposed * ring_seconds(mem.params, l.dp, dp_gbps, mc.latency_s);
    if (mc.adamw_params_per_s > 0) {
        // Each rank updates its parameters, or its shard of them under ZeRO;
        // with more ranks than cores the node's updates share the cores: the
        // node's share of every replica's stages and shards (tp copies of the
        // replicated norms and biases, the last stage's copy of a tied table),
        // once per replica without ZeRO.
        const double shards = l.zero_stage ? l.dp : 1;
        const PlanParams b = plan_block_params(m), e = plan_embedding_params(m),
                         h = plan_head_params(m);
        const double tied_copy =
            m.lm_head && m.tied_head && l.pp > 1 ? double(m.vocab) * double(m.embedding) : 0;
        const double replica = double(m.distinct_blocks) * (b.split + l.tp * b.replicated) +
                               e.split + l.tp * e.replicated + h.split + l.tp * h.replicated +
                               tied_copy;
        const double node = replica * l.dp / shards * double(ranks_node) / double(world);
        t.optimizer_s = std::max(mem.params / k_f32 / shards / (mc.adamw_params_per_s * threads),
                                 node / (mc.adamw_params_per_s * mc.cores));
    }
    t.step_s = t.compute_s + t.tp_comm_s + t.pp_comm_s + t.dp_comm_s + t.optimizer_s;
    return t;
}

}  // namespace loom
