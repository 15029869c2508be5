// Linear: row registration and the forward/backward op calls.
#include "nn/linear.h"

#include "core/check.h"

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
    l.in = in;
    l.out = out;
    l.layout = layout;
    l.weight.row = t.add(weight_row(prefix, in, out, layout, init));
    if (has_bias) l.bias.row = t.add(bias_row(prefix, out, init, layout));
    return l;
}

Linear Linear::make_fused(ParamTable& t, const std::vector<std::string>& prefixes, int64_t in,
                          const std::vector<int64_t>& outs, const LinearInit& init) {
    LOOM_ASSERT(!prefixes.empty() && prefixes.size() == outs.size(), "bad fused linear");
    Linear l;
    l.in = in;
    l.layout = WeightLayout::out_in;
    for (size_t i = 0; i < prefixes.size(); ++i) {
        // Only the first row is aligned: the rest follow without a gap, so the
        // weights read as one (sum OC, C) matrix.
        const int r = t.add(weight_row(prefixes[i], in, outs[i], l.layout, init), i == 0);
        if (i == 0) l.weight.row = r;
        l.out += outs[i];
    }
    for (size_t i = 0; i < prefixes.size(); ++i) {
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

void Linear::forward(float* y, const float* x, int64_t N) const {
    const float* b = bias.defined() ? bias.data : nullptr;
    if (compute == ComputeDtype::bf16)
        matmul_forward_bf16(y, x, weight.data, b, N, in, out, layout);
    else if (compute == ComputeDtype::fp16)
        matmul_forward_fp16(y, x, weight.data, b, N, in, out, layout);
    else
        matmul_forward(y, x, weight.data, b, N, in, out, layout);
}

void Linear::backward(float* dx, const float* dy, const float* x, int64_t N,
                      bool accumulate_dx) const {
    float* db = bias.defined() ? bias.grad : nullptr;
    if (compute == ComputeDtype::bf16)
        matmul_backward_bf16(dx, weight.grad, db, dy, x, weight.data, N, in, out, layout,
                             accumulate_dx);
    else if (compute == ComputeDtype::fp16)
        matmul_backward_fp16(dx, weight.grad, db, dy, x, weight.data, N, in, out, layout,
                             accumulate_dx);
    else
        matmul_backward(dx, weight.grad, db, dy, x, weight.data, N, in, out, layout, accumulate_dx);
}

}  // namespace loom
