// Step time of one layout on a GPU cluster (docs/plan-gpu.md, "Time"):
//   - each GEMM of a layer priced by its shape: efficiency
//     gemm_efficiency x prod over M, N, K of d / (d + gemm_half_dim), so
//     narrow products (small tensor-parallel slices, per-head attention)
//     run below the large-GEMM rate;
//   - the memory-bound kernels (LayerNorm, bias-dropout-residual, GeLU,
//     softmax and attention dropout unless fused) as bytes over HBM;
//   - tensor-parallel collectives as rings over NVLink (or the network when
//     tp exceeds a node), pipeline sends over the link between stages;
//   - the pipeline bubble from simulating the schedule with these forward
//     and backward chunk times (pipeline_sim.h);
//   - the gradient reduction hidden behind the last micro-batch's backward;
//   - AdamW streaming its state through HBM.
// Backward GEMMs take twice the forward's time (input and weight gradients
// of the same shapes), backward memory-bound kernels twice their traffic.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "parallel/gpu_plan.h"
#include "parallel/pipeline_sim.h"

namespace loom {

namespace {

struct Rates {
    double peak = 0;      // FLOP/s of the precision
    double hbm = 0;       // bytes/s reached by streaming kernels
    double half_dim = 0;  // GEMM shape factor
    double gemm_eff = 0;
};

double gemm_s(const Rates& r, double M, double N, double K, double batch = 1) {
    auto f = [&](double d) { return d / (d + r.half_dim); };
    return batch * 2 * M * N * K / (r.peak * r.gemm_eff * f(M) * f(N) * f(K));
}

// Ring collective moving `bytes` per rank as an all-reduce would
// (reduce-scatter + all-gather): 2 (n-1)/n x bytes over the bus bandwidth.
double ring_s(double bytes, int n, double gbps, double latency_us) {
    if (n <= 1 || bytes <= 0) return 0;
    return 2.0 * (n - 1) / n * bytes / (gbps * 1e9) + 2.0 * (n - 1) * latency_us * 1e-6;
}

double act_bytes(const std::string& precision) {
    return precision == "bf16" || precision == "fp16" ? 2 : 4;
}

// Bubble share of a schedule with these chunk times; simulated (and
// remembered) unless the schedule is too long to simulate quickly.
double bubble_share(ScheduleKind kind, int pp, int64_t micro, int v, double fwd, double bwd,
                    bool simulate) {
    if (pp <= 1) return 0;
    if (!simulate) return schedule_bubble_theory(kind, pp, int(micro), v);
    const int64_t ratio = std::max<int64_t>(1, std::llround(100.0 * bwd / fwd));
    using Key = std::tuple<int, int, int64_t, int, int64_t>;
    static thread_local std::map<Key, double> cache;
    const Key key{int(kind), pp, micro, v, ratio};
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    double b = 0;
    if (double(pp) * double(micro) * v > 4e5) {
        b = schedule_bubble_theory(kind, pp, int(micro), v);
    } else {
        SimOptions so;
        so.forward_time = 100;
        so.backward_time = ratio;
        const SimResult sim = simulate_schedule(kind, pp, int(micro), v, so);
        b = sim.ok ? sim.bubble : schedule_bubble_theory(kind, pp, int(micro), v);
    }
    cache[key] = b;
    return b;
}

}  // namespace

double gpu_model_flops(const PlanModel& m, int64_t seq, int64_t rows) {
    const double h = double(m.hidden), s = double(seq);
    const double per_token = double(m.layers) * layer_flops_per_token(m, seq) +
                             2 * h * double(m.vocab) * gpu_logit_share(m);
    return 3 * per_token * double(rows) * s;
}

double gpu_hardware_flops(const PlanModel& m, int64_t seq, int64_t rows, const GpuLayout& l) {
    const double h = double(m.hidden), s = double(seq), keys = plan_attention_keys(m, seq);
    const double tokens = double(rows) * s, L = double(m.layers);
    double extra = 0;
    if (l.recompute == Recompute::full)
        extra = L * layer_flops_per_token(m, seq);
    else if (l.recompute == Recompute::selective)
        extra = L * 4 * keys * h;  // Q K^T and the product with V again
    if (l.fused_attention && l.recompute != Recompute::full)
        extra += L * 2 * keys * h;  // the fused backward rebuilds Q K^T
    return gpu_model_flops(m, seq, rows) + extra * tokens;
}

GpuTime gpu_plan_time(const GpuJob& job, const GpuLayout& l, bool simulate) {
    const PlanModel& m = job.model;
    const GpuProfile& p = job.machine;
    Rates r;
    r.peak = gpu_peak_tflops(p, l.precision) * 1e12;
    r.hbm = p.hbm_gbps * 1e9 * p.hbm_efficiency;
    r.half_dim = p.gemm_half_dim;
    r.gemm_eff = p.gemm_efficiency;
    const double s = double(job.seq), b = double(l.micro_batch), h = double(m.hidden),
                 I = double(m.intermediate), a = double(m.heads), t = double(l.tp),
                 V = double(m.vocab);
    const double bs = b * s, hd = h / a, heads = b * a / t, e = act_bytes(l.precision);
    // Keys per query: the sequence, or a sliding window's span (a windowed
    // kernel computes only that band).
    const double keys = plan_attention_keys(m, job.seq);
    // q, k and v widths: k and v of NKV heads (grouped-query attention).
    const double qkv_w = h + 2 * double(m.kv_width());

    // One layer, one micro-batch, forward, on one GPU. SwiGLU's gate and up
    // run as one GEMM of width 2I (as Loom and Megatron fuse them).
    const double g_att = gemm_s(r, s, keys, hd, heads) + gemm_s(r, s, hd, keys, heads);
    const double mlp_in = m.gated_mlp ? 2 * I : I;
    const double g = gemm_s(r, bs, qkv_w / t, h) + g_att + gemm_s(r, bs, h, h / t) +
                     gemm_s(r, bs, mlp_in / t, h) + gemm_s(r, bs, h, I / t);
    // The memory-bound kernels' bytes (block_elementwise_bytes): norms and
    // bias-dropout-residual work on 1/t of the tokens under SP.
    const double sp = l.sequence_parallel ? t : 1.0;
    const BlockElementwiseBytes ew = block_elementwise_bytes(m, job.seq, e, l.fused_attention);
    const double ew_lin = bs * (ew.replicated / sp + ew.mlp / t);
    // Softmax (read + write scores), attention dropout (read, write, mask).
    const double ew_att = bs * ew.attention / t;
    const double mb_fwd = (ew_lin + ew_att) / r.hbm;
    const bool cross_node_tp = l.tp > p.gpus_per_node;
    const double tp_gbps = cross_node_tp ? p.network_gbps * p.network_efficiency
                                         : p.nvlink_gbps * p.nvlink_efficiency;
    const double tp_lat = cross_node_tp ? p.inter_latency_us : p.intra_latency_us;
    const double ar = ring_s(e * bs * h, l.tp, tp_gbps, tp_lat);  // one all-reduce

    const double fwd_layer = g + mb_fwd + 2 * ar;
    double bwd_layer = 2 * g + 2 * mb_fwd + 2 * ar;
    if (l.fused_attention) bwd_layer += gemm_s(r, s, keys, hd, heads);
    double rec_layer = 0, rec_gemm = 0, rec_mb = 0, rec_ar = 0;
    if (l.recompute == Recompute::full) {
        rec_gemm = g, rec_mb = mb_fwd, rec_ar = 2 * ar;
    } else if (l.recompute == Recompute::selective) {
        rec_gemm = g_att, rec_mb = ew_att / r.hbm;
    }
    rec_layer = rec_gemm + rec_mb + rec_ar;

    // The busiest stage: its layers (rounded-up share) and, on the last
    // stage, the output layer and loss (fp32 logits read and written).
    const int v = l.pp > 1 && l.schedule == ScheduleKind::interleaved ? l.virtual_stages : 1;
    const double chunk = std::ceil(double(m.layers) / double(l.pp)) / v;  // as the memory's
    const double layers = chunk * v;
    const double share = gpu_logit_share(m);
    const double logit_g = share > 0 ? 3 * gemm_s(r, bs * share, V / t, h) : 0;
    const double logit_mb = 3 * 2 * 4 * bs * share * V / t / r.hbm;
    double pp_comm = 0;
    if (l.pp > 1) {
        const bool cross_node_pp = l.tp * l.dp >= p.gpus_per_node;
        const double gbps = cross_node_pp ? p.network_gbps * p.network_efficiency
                                          : p.nvlink_gbps * p.nvlink_efficiency;
        const double lat = cross_node_pp ? p.inter_latency_us : p.intra_latency_us;
        // Each chunk sends its activation and receives its gradient, split
        // over the tp ranks (scatter-gather).
        pp_comm = 2.0 * v * (e * bs * h / t / (gbps * 1e9) + lat * 1e-6);
    }

    const int64_t micro = l.global_batch / (int64_t(l.dp) * l.micro_batch);
    GpuTime out;
    const double per_micro_gemm = layers * (3 * g + rec_gemm) + logit_g +
                                  (l.fused_attention ? layers * gemm_s(r, s, keys, hd, heads) : 0);
    const double per_micro_mb = layers * (3 * mb_fwd + rec_mb) + logit_mb;
    const double per_micro_tp = layers * (4 * ar + rec_ar);
    const double per_micro = per_micro_gemm + per_micro_mb + per_micro_tp + pp_comm;
    const double fwd_chunk = chunk * fwd_layer, bwd_chunk = chunk * (bwd_layer + rec_layer);
    const ScheduleKind kind = l.pp > 1 ? l.schedule : ScheduleKind::one_f_one_b;
    out.bubble = bubble_share(kind, l.pp, micro, v, fwd_chunk, bwd_chunk, simulate);
    const double stretch = double(micro) / (1.0 - out.bubble);
    out.gemm_s = per_micro_gemm * double(micro);
    out.memory_bound_s = per_micro_mb * double(micro);
    out.tp_comm_s = per_micro_tp * double(micro);
    out.pp_comm_s = pp_comm * double(micro);
    const double pipeline = per_micro * stretch;

    // Gradients (in the training precision) of this GPU's parameters, over
    // the dp group; ZeRO moves the same bytes as reduce-scatter + all-gather.
    // Ranks are ordered tp fastest, then dp: the group leaves the node once
    // tp x dp exceeds it.
    const double P = std::max(gpu_stage_params(m, job.seq, l, true),
                              gpu_stage_params(m, job.seq, l, false));
    const bool cross_node_dp = l.tp * l.dp > p.gpus_per_node;
    const double dp_gbps = cross_node_dp ? p.network_gbps * p.network_efficiency
                                         : p.nvlink_gbps * p.nvlink_efficiency;
    out.dp_comm_s = ring_s(e * P, l.dp, dp_gbps,
                           cross_node_dp ? p.inter_latency_us : p.intra_latency_us);
    // Buckets reduce while the last micro-batch's backward runs.
    const double last_backward = layers * (bwd_layer + rec_layer);
    out.dp_exposed_s = std::max(0.0, out.dp_comm_s - last_backward);
    // AdamW: fp32 master read + write, two moments read + write, the
    // gradient read and the 16-bit weight written: 28 bytes per parameter.
    const double opt_params = l.zero_stage >= 1 ? P / l.dp : P;
    out.optimizer_s = 28 * opt_params / r.hbm;
    out.step_s = pipeline + out.dp_exposed_s + out.optimizer_s;
    return out;
}

}  // namespace loom
