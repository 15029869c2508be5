// Memory per GPU of one layout (docs/plan-gpu.md, "Memory"): model state in
// mixed precision with ZeRO 0/1/2, the activations Korthikanti et al. 2022
// count per layer (Table 2: no recompute, selective, full, with and without
// sequence parallelism) times the micro-batches the schedule keeps in flight
// on the busiest stage, the loss layer, and the stated margins.
//
// Activations are added up tensor by tensor (what each op saves for its
// backward) rather than from the paper's closed forms, so the test can check
// the sum against those closed forms.
#include <algorithm>
#include <cmath>

#include "parallel/gpu_plan.h"

namespace loom {

namespace {

constexpr double k_gib = double(1 << 30);

bool mixed(const std::string& precision) {
    return precision == "bf16" || precision == "fp16";
}

// One tensor an op saves for backward, in bytes per token of the layer.
struct Saved {
    double bytes_per_token;  // for s*b tokens
    bool tp_split;           // divided by t under tensor parallelism
    bool attention_core;     // dropped (recomputed) under selective recompute
};

// What one transformer layer saves for backward, with 16-bit activations and
// 1-byte dropout masks (Korthikanti et al. 2022, Section 4.1, for a pre- or
// post-LN layer with a GeLU MLP and dropout everywhere). a*s^2*b terms are
// per token here as a*s.
//
// Adapted to the Llama family (Llama, Mistral, Qwen2), with rotary embeddings
// applied in place (their backward needs only cos and sin):
//   - K and V are 2 NKV d bytes each per token instead of 2h;
//   - with grouped queries (NKV < NH), Loom's attention reads q, k and v
//     expanded to every query head (nn/self_attention.h), a 6h copy kept
//     beside the projection's output;
//   - SwiGLU keeps its input (shared by gate and up), the gate and up
//     outputs (the inputs of silu(gate) x up, 2I each) and down's input (2I):
//     6I where GeLU keeps 4I;
//   - RMSNorm keeps its input as LayerNorm does;
//   - no dropout (the family's configs have none): no masks, and without
//     attention dropout the product with V reads the softmax output itself.
std::vector<Saved> layer_saves(const PlanModel& m, int64_t seq, bool fused_attention) {
    const double h = double(m.hidden), I = double(m.intermediate), a = double(m.heads),
                 s = double(seq), kv = double(m.kv_width());
    std::vector<Saved> v = {
        {2 * h, false, false},          // norm 1 input
        {2 * h, false, false},          // QKV projection input (norm 1 output)
        {2 * h + 2 * kv, true, false},  // Q and K for Q K^T
        {2 * kv, true, false},          // V for softmax(.) V
        {2 * h, true, false},           // output projection input (attention context)
        {2 * h, false, false},          // norm 2 input
        {2 * h, false, false},          // MLP first linear input (gate and up share it)
    };
    if (m.kv() != m.heads) v.push_back({6 * h, true, false});  // q|k|v expanded to NH heads
    if (m.gated_mlp) {
        v.push_back({4 * I, true, false});  // gate and up outputs (silu x mul inputs)
        v.push_back({2 * I, true, false});  // down input: silu(gate) x up
    } else {
        v.push_back({2 * I, true, false});  // GeLU input
        v.push_back({2 * I, true, false});  // second linear input (GeLU output)
    }
    if (m.hidden_dropout) {
        v.push_back({1 * h, false, false});  // attention output dropout mask
        v.push_back({1 * h, false, false});  // MLP dropout mask
    }
    if (!fused_attention) {
        v.push_back({2 * a * s, true, true});  // softmax output
        if (m.attention_dropout) {
            v.push_back({1 * a * s, true, true});  // attention dropout mask
            v.push_back({2 * a * s, true, true});  // dropout output (input of the product with V)
        }
    } else {
        v.push_back({4 * a, true, false});  // fp32 log-sum-exp per row and head
    }
    return v;
}

double ceil_div(double a, double b) {
    return std::ceil(a / b);
}

// Layers of one chunk on the busiest rank: the rank holds the rounded-up
// share of L over pp, spread over its v chunks (the runtime's split may give
// chunks unequal sizes; their sum is what memory and time see).
double chunk_layers(const PlanModel& m, const GpuLayout& l) {
    const int v = l.pp > 1 && l.schedule == ScheduleKind::interleaved ? l.virtual_stages : 1;
    return ceil_div(double(m.layers), double(l.pp)) / v;
}

}  // namespace

double gpu_logit_share(const PlanModel& m) {
    return m.causal ? 1.0 : m.lm_head ? m.labelled_share : 0.0;
}

double gpu_layer_activation_bytes(const PlanModel& m, int64_t seq, const GpuLayout& l) {
    const double tokens = double(seq * l.micro_batch), t = double(l.tp);
    double per_token = 0;
    for (const Saved& x : layer_saves(m, seq, l.fused_attention)) {
        if (l.recompute == Recompute::selective && x.attention_core) continue;
        const bool split = x.tp_split || l.sequence_parallel;
        per_token += x.bytes_per_token / (split ? t : 1.0);
    }
    return tokens * per_token;
}

double gpu_stage_params(const PlanModel& m, int64_t seq, const GpuLayout& l, bool first_stage) {
    const double h = double(m.hidden), t = double(l.tp);
    const double v = l.pp > 1 && l.schedule == ScheduleKind::interleaved ? l.virtual_stages : 1;
    const double layers = chunk_layers(m, l) * v;
    // Per layer: QKV, projection and the MLP split by t with their
    // column-parallel biases; row-parallel biases and norms replicated
    // (plan_block_params: k and v of NKV heads, SwiGLU's three matrices).
    const PlanParams b = plan_block_params(m);
    double p = layers * (b.split / t + b.replicated);
    const double word = double(m.vocab) * h / t;  // vocabulary-parallel table
    const double positions = m.rotary ? 0 : double(std::max<int64_t>(m.positions, seq)) * h;
    if (first_stage) p += word + positions;
    if (!first_stage || l.pp == 1) {
        if (m.rms_norm) {
            // The Llama family: its final norm and head (an untied lm_head is
            // vocabulary-parallel), and a copy of a tied table with pp > 1.
            const PlanParams head = plan_head_params(m);
            p += head.split / t + head.replicated;
            if (m.causal && m.tied_head && l.pp > 1) p += word;
        } else {
            // The last stage holds the final LayerNorm and, with pp > 1, its own
            // copy of the tied word embeddings for the output layer.
            p += 2 * h + (l.pp > 1 ? word : 0);
        }
    }
    return p;
}

GpuMemory gpu_plan_memory(const GpuJob& job, const GpuLayout& l) {
    const PlanModel& m = job.model;
    const double t = double(l.tp), h = double(m.hidden), V = double(m.vocab);
    const double sbh = double(job.seq * l.micro_batch) * h;
    const int64_t micro = l.global_batch / std::max<int64_t>(1, int64_t(l.dp) * l.micro_batch);
    const bool interleaved = l.pp > 1 && l.schedule == ScheduleKind::interleaved;
    const int v = interleaved ? l.virtual_stages : 1;
    const ScheduleKind kind = l.pp > 1 ? l.schedule : ScheduleKind::one_f_one_b;
    const double per_layer = gpu_layer_activation_bytes(m, job.seq, l);
    const double n = chunk_layers(m, l);

    auto stage = [&](int rank) {
        GpuMemory r;
        r.first_stage = rank == 0;
        r.layer_activation = per_layer;
        const bool first = rank == 0, last = rank == l.pp - 1;
        const double P = gpu_stage_params(m, job.seq, l, first);
        const double dp = double(l.dp);
        if (mixed(l.precision)) {
            r.weights = 2 * P;
            r.grads = l.zero_stage >= 2 ? 2 * P / dp : 2 * P;
            // fp32 master weights and both Adam moments: 12 bytes per parameter.
            r.optimizer = (l.zero_stage >= 1 ? 12 / dp : 12) * P;
        } else {
            r.weights = 4 * P;
            r.grads = l.zero_stage >= 2 ? 4 * P / dp : 4 * P;
            r.optimizer = (l.zero_stage >= 1 ? 8 / dp : 8) * P;
        }
        const int chunks =
            l.pp > 1 ? schedule_max_in_flight(kind, l.pp, rank, int(micro), v) : 1;
        r.in_flight = chunks;
        const double layers_kept = double(chunks) * n;
        const double act_scale = mixed(l.precision) ? 1.0 : 2.0;  // fp32 activations
        const double input = 2 * sbh / (l.sequence_parallel ? t : 1.0);
        if (l.recompute == Recompute::full) {
            // Each layer keeps its input; backward rebuilds one layer at a time.
            r.layer_activation = input;
            GpuLayout whole = l;
            whole.recompute = Recompute::none;
            r.activations = layers_kept * input + gpu_layer_activation_bytes(m, job.seq, whole);
        } else {
            r.activations = layers_kept * per_layer;
        }
        // Embedding dropout mask of each micro-batch in flight (the paper's sbhp/t).
        if (first && m.hidden_dropout)
            r.activations += sbh / t * std::min<double>(chunks, double(micro));
        r.activations *= act_scale;
        // Output layer and loss: Korthikanti's 4sbh/t (1 + v/h), one micro-batch.
        if (last) r.logits = 4 * sbh / t * (1 + V / h) * gpu_logit_share(m) * act_scale;
        r.reserved = job.machine.reserved_gib * k_gib;
        r.allocator = job.machine.allocator_margin * (r.activations + r.logits);
        r.total = r.weights + r.grads + r.optimizer + r.activations + r.logits + r.reserved +
                  r.allocator;
        return r;
    };
    GpuMemory best = stage(0);
    if (l.pp > 1) {
        GpuMemory last = stage(l.pp - 1);
        if (last.total > best.total) best = last;
    }
    return best;
}

}  // namespace loom
