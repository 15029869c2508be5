// Feed-forward forward/backward as op calls.
#include "nn/mlp.h"

#include "ops/device_ops.h"

namespace loom {

void Mlp::forward(ActPtr y, Acts& acts, CActPtr x, int64_t N) const {
    fc.forward(acts.fc, x, N, acts.x16);
    if (gated) {
        const int64_t I = proj.in;
        if (acts.act16 != nullptr) {
            ctx.nn().swiglu_forward(ctx, acts.act16, DType::bf16, acts.fc, N, I);
            proj.forward_rounded(y, acts.act16, N);
        } else {
            ctx.nn().swiglu_forward(ctx, acts.act, ctx.act, acts.fc, N, I);
            proj.forward(y, acts.act, N);
        }
        return;
    }
    if (acts.act16 != nullptr) {
        ctx.nn().activation_forward(ctx, acts.act16, DType::bf16, acts.fc, N * fc.out, act);
        proj.forward_rounded(y, acts.act16, N);
        return;
    }
    ctx.nn().activation_forward(ctx, acts.act, ctx.act, acts.fc, N * fc.out, act);
    proj.forward(y, acts.act, N);
}

void Mlp::backward(ActPtr dx, CActPtr dy, const Acts& acts, CActPtr x, int64_t N, ActPtr dI,
                   bool accumulate_dx) const {
    if (gated) {
        // d(gate | up) in dI's first N * fc.out, d(post-activation) after it.
        ActPtr dact = dI + N * fc.out;
        proj.backward(dact, dy, acts.act, N, false, acts.act16);
        ctx.nn().swiglu_backward(ctx, dI, acts.fc, dact, N, proj.in);
        fc.backward(dx, dI, x, N, accumulate_dx, acts.x16);
        return;
    }
    proj.backward(dI, dy, acts.act, N, false, acts.act16);
    ctx.nn().activation_backward(ctx, dI, acts.fc, dI, N * fc.out, act);  // in place
    fc.backward(dx, dI, x, N, accumulate_dx, acts.x16);
}

}  // namespace loom
