// LayerNorm module: rows and op calls.
#include "nn/layer_norm.h"

#include "ops/device_ops.h"

namespace loom {

LayerNorm LayerNorm::make(ParamTable& t, const std::string& prefix, int64_t C, double eps,
                          bool head) {
    LayerNorm ln;
    ln.C = C;
    ln.eps = eps;
    ParamRow w;
    w.name = prefix + ".weight";
    w.shape = Shape{C};
    w.init = InitRule::ones;
    w.decay = false;
    w.head = head;
    ln.weight.row = t.add(w);
    ParamRow b = w;
    b.name = prefix + ".bias";
    b.init = InitRule::zeros;
    ln.bias.row = t.add(b);
    return ln;
}

LayerNorm LayerNorm::make_rms(ParamTable& t, const std::string& prefix, int64_t C, double eps) {
    LayerNorm ln;
    ln.C = C;
    ln.eps = eps;
    ln.rms = true;
    ParamRow w;
    w.name = prefix + ".weight";
    w.shape = Shape{C};
    w.init = InitRule::ones;
    w.decay = false;
    ln.weight.row = t.add(w);
    return ln;
}

void LayerNorm::forward(ActPtr y, Acts& acts, CActPtr x, int64_t N) const {
    if (rms) {
        ctx.nn().rms_norm_forward(ctx, y, acts.rstd, x, weight.data, N, C, eps);
        return;
    }
    ctx.nn().layer_norm_forward(ctx, y, acts.mean, acts.rstd, x, weight.data, bias.data, N, C, eps);
}

void LayerNorm::backward(ActPtr dx, CActPtr dy, CActPtr x, const Acts& acts, int64_t N,
                         bool accumulate_dx) const {
    if (rms) {
        ctx.nn().rms_norm_backward(ctx, dx, weight.grad, dy, x, weight.data, acts.rstd, N, C,
                                   accumulate_dx);
        return;
    }
    ctx.nn().layer_norm_backward(ctx, dx, weight.grad, bias.grad, dy, x, weight.data, acts.mean,
                                 acts.rstd, N, C, accumulate_dx);
}

}  // namespace loom
