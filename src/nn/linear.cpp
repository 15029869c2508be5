// Linear: row registration and the forward/backward op calls.
#include "nn/linear.h"

#include <vector>

#include "comm/tp_regions.h"
#include "core/check.h"
#include "ops/device_ops.h"
#include "ops/gemm.h"

namespace loom {

namespace {

ShardSpec shard_for(TpRole tp, WeightLayout layout, bool is_weight) {
    ShardSpec s;
    if (tp == TpRole::none) return s;
    // Column parallel splits the output features, row parallel the inputs.
    const bool split_out = tp == TpRole::column;
    if (!is_weight) {
        if (split_out) s.kind = ShardSpec::Kind::split;  // bias of a column-parallel linear
        return s;
    }
    s.kind = ShardSpec::Kind::split;
    const int out_axis = layout == WeightLayout::out_in ? 0 : 1;
    s.axis = split_out ? out_axis : 1 - out_axis;
    return s;
}

ParamRow weight_row(const std::string& prefix, int64_t in, int64_t out, WeightLayout layout,
                    const LinearInit& init) {
    ParamRow r;
    r.name = prefix + ".weight";
    r.shape = layout == WeightLayout::out_in ? Shape{out, in} : Shape{in, out};
    r.init = InitRule::normal;
    r.init_std = init.std;
    r.decay = true;
    r.head = init.head;
    r.shard = shard_for(init.tp, layout, true);
    return r;
}

ParamRow bias_row(const std::string& prefix, int64_t out, const LinearInit& init,
                  WeightLayout layout) {
    ParamRow r;
    r.name = prefix + ".bias";
    r.shape = Shape{out};
    r.init = InitRule::zeros;
    r.decay = false;
    r.head = init.head;
    r.shard = shard_for(init.tp, layout, false);
    return r;
}

}  // namespace

Linear Linear::make(ParamTable& t, const std::string& prefix, int64_t in, int64_t out,
                    WeightLayout layout, bool has_bias, const LinearInit& init) {
    Linear l;
    l.tp_role = init.tp;
    l.tp_blocks = init.tp_blocks;
    l.in = in;
    l.out = out;
    l.layout = layout;
    l.weight.row = t.add(weight_row(prefix, in, out, layout, init));
    if (has_bias) l.bias.row = t.add(bias_row(prefix, out, init, layout));
    return l;
}

Linear Linear::make_fused(ParamTable& t, const std::vector<std::string>& prefixes, int64_t in,
                          const std::vector<int64_t>& outs, const LinearInit& init,
                          bool has_bias) {
    LOOM_ASSERT(!prefixes.empty() && prefixes.size() == outs.size(), "bad fused linear");
    Linear l;
    l.tp_role = init.tp;
    l.n_fused = int(prefixes.size());
    l.in = in;
    l.layout = WeightLayout::out_in;
    for (size_t i = 0; i < prefixes.size(); ++i) {
        // Only the first row is aligned: the rest follow without a gap, so the
        // weights read as one (sum OC, C) matrix.
        const int r = t.add(weight_row(prefixes[i], in, outs[i], l.layout, init), i == 0);
        if (i == 0) l.weight.row = r;
        l.out += outs[i];
    }
    for (size_t i = 0; has_bias && i < prefixes.size(); ++i) {
        const int r = t.add(bias_row(prefixes[i], outs[i], init, l.layout), i == 0);
        if (i == 0) l.bias.row = r;
    }
    return l;
}

Linear Linear::make_tied(int weight_row_idx, int bias_row_idx, int64_t in, int64_t out) {
    Linear l;
    l.in = in;
    l.out = out;
    l.layout = WeightLayout::out_in;
    l.weight.row = weight_row_idx;
    l.bias.row = bias_row_idx;
    return l;
}

void Linear::shard(ParamTable& t, const ModelTp& tp) {
    if (tp_role == TpRole::none || !tp.active()) return;
    LOOM_ASSERT(tp.comm != nullptr, "tensor parallelism of size {} without a tp group", tp.size);
    // Fused rows (BERT's query/key/value) are split one by one: each keeps its
    // own heads, and packed back to back they form the local (3C/tp, C) matrix
    // the fused GEMM and attention read.
    for (int k = 0; k < n_fused; ++k) {
        t.shard_row(weight.row + k, tp.size, tp.rank, tp_blocks);
        // A row-parallel bias is replicated: added once after the all-reduce.
        if (bias.defined() && tp_role == TpRole::column)
            t.shard_row(bias.row + k, tp.size, tp.rank, tp_blocks);
    }
    lora_shard(t, *this, tp.size, tp.rank);
    if (tp_role == TpRole::column)
        out /= tp.size;
    else
        in /= tp.size;
    this->tp = tp.buffer_comm();
}

// Operands narrower than the activations (the CPU's bf16) are rounded as
// read; the weight's rounding is made once per forward and kept for backward
// (parameters change only between a backward and the next forward).
bool Linear::rounds_operands() const {
    return compute == DType::bf16 && ctx.act != DType::bf16;
}

void Linear::gemm_forward(ActPtr y, const Input& x, CActPtr b, int64_t N) const {
    LOOM_ASSERT(x.rounded == nullptr || rounds_operands(),
                "a bf16-rounded input to a linear that does not round to bf16");
    GemmRounded r;
    if (rounds_operands()) {
        weight16_.resize(size_t(in * out));
        convert_f32_to_bf16(weight16_.data(), weight.data.as<const float>(), in * out);
        r = GemmRounded{weight16_.data(), x.keep16, x.rounded};
    }
    ctx.nn().matmul_forward(ctx, compute, y, x.x, weight.data, b, N, in, out, layout, r);
}

void Linear::gemm_backward(ActPtr dx, CActPtr dy, CActPtr x, int64_t N, bool accumulate_dx,
                           const uint16_t* x16) const {
    ActPtr db = bias.defined() ? bias.grad : nullptr;
    GemmRounded r;
    if (rounds_operands())
        r = GemmRounded{int64_t(weight16_.size()) == in * out ? weight16_.data() : nullptr, nullptr,
                        x16};
    ctx.nn().matmul_backward(ctx, compute, dx, weight.grad, db, dy, x, weight.data, N, in, out,
                             layout, accumulate_dx, r);
}

void Linear::forward(ActPtr y, CActPtr x, int64_t N, uint16_t* keep_x16) const {
    forward_input(y, Input{x, keep_x16, nullptr}, N);
}

void Linear::forward_rounded(ActPtr y, const uint16_t* x16, int64_t N) const {
    forward_input(y, Input{nullptr, nullptr, x16}, N);
}

void Linear::forward_input(ActPtr y, const Input& x, int64_t N) const {
    const bool row_parallel = tp != nullptr && tp_role == TpRole::row;
    CActPtr b = bias.defined() ? bias.data : nullptr;
    if (!row_parallel) {
        // Column parallel: Megatron "f" is the identity forward.
        gemm_forward(y, x, b, N);
    } else {
        // Megatron "g": the partial products of the input-feature slices summed
        // on tp; the bias joins after the sum, or it would count tp times.
        gemm_forward(y, x, nullptr, N);
        tp_sum_inplace(y, N * out, y.dtype(), *tp);
        if (b) ctx.nn().add_bias(ctx, y, b, N, out);
    }
    // PEFT adds the adapters to the base output, bias included.
    if (!lora.empty())
        lora_forward(*this, y, x.x,
                     rounds_operands() ? (x.rounded ? x.rounded : x.keep16) : nullptr, N);
}

void Linear::backward(ActPtr dx, CActPtr dy, CActPtr x, int64_t N, bool accumulate_dx,
                      const uint16_t* x16) const {
    base_backward(dx, dy, x, N, accumulate_dx, x16);
    // After the base: its dx overwrites (or adds), the adapters' adds.
    if (!lora.empty()) lora_backward(*this, dx, dy, x, rounds_operands() ? x16 : nullptr, N);
}

void Linear::base_backward(ActPtr dx, CActPtr dy, CActPtr x, int64_t N, bool accumulate_dx,
                           const uint16_t* x16) const {
    // Row parallel: Megatron "g" bwd is the identity (dy is replicated, the
    // bias gradient is the same sum on every rank), so only the column role
    // has work: Megatron "f" bwd, all-reduce(sum, tp) of the input gradient.
    if (tp == nullptr || tp_role != TpRole::column || dx == nullptr) {
        gemm_backward(dx, dy, x, N, accumulate_dx, x16);
        return;
    }
    if (!accumulate_dx) {
        gemm_backward(dx, dy, x, N, false, x16);
        tp_sum_inplace(dx, N * in, dx.dtype(), *tp);
        return;
    }
    // NOTE: dx already holds the residual stream's gradient, the same on
    // every rank; only this branch's partial gradient may be summed over tp,
    // so it is computed apart (in the model's workspace), reduced, then added.
    LOOM_ASSERT(tp_work,
                "a column-parallel linear accumulates its input gradient without the "
                "model's tp workspace");
    gemm_backward(tp_work, dy, x, N, false, x16);
    tp_sum_inplace(tp_work, N * in, tp_work.dtype(), *tp);
    ctx.nn().add_inplace(ctx, dx, tp_work, N * in);
}

}  // namespace loom
