// Transformer block forward/backward: the op sequence for each LN placement.
//
// Buffer choreography in backward (post-LN), with dio = dy on entry:
//   t   = ln2'(dio)                      d r2
//   d_o = drop'(t) -> dio, or t           d mlp output
//   t  += mlp'(d_o)                       d h = d r2 + d mlp input
//   dio = ln1'(t)                         d r1
//   d_a = drop'(dio) -> t, or dio         d attention output
//   dio += attn'(d_a)                     d x = d r1 + d attention input
// Each accumulation happens after the last read of the buffer it overwrites.
#include "nn/transformer_block.h"

#include "ops/device_ops.h"

namespace loom {

void TransformerBlock::plan(Acts& acts, ActArena& a, int64_t B, int64_t T, bool fused) const {
    const int64_t N = B * T;
    acts.attn.plan(a, B, T, attn, fused);
    acts.mlp.plan(a, N, mlp);
    acts.ln1.plan(a, N);
    acts.ln2.plan(a, N);
    acts.ln1_out = a.take_act(N * C, ctx.act);
    acts.res1 = a.take_act(N * C, ctx.act);
    if (norm == NormPlacement::pre) {
        acts.ln2_out = a.take_act(N * C, ctx.act);
        acts.res2 = nullptr;
    } else {
        acts.ln2_out = nullptr;
        acts.res2 = a.take_act(N * C, ctx.act);
    }
}

void TransformerBlock::forward(ActPtr y, Acts& acts, CActPtr x, const Step& s) const {
    const int64_t N = s.B * s.T;
    set_lora_dropout(s, nullptr);
    const NnOps& ops = ctx.nn();
    const int64_t per_sample = s.T * C;
    if (norm == NormPlacement::post) {
        attn.forward(acts.res1, acts.attn, x, s.B, s.T, s.tok, s.drop_probs);
        if (s.drop_attn_out.active())
            ops.dropout_forward(ctx, acts.res1, acts.res1, s.B, per_sample, s.drop_attn_out);
        ops.residual_forward(ctx, acts.res1, acts.res1, x, N * C);
        ln1.forward(acts.ln1_out, acts.ln1, acts.res1, N);
        mlp.forward(acts.res2, acts.mlp, acts.ln1_out, N);
        if (s.drop_ffn_out.active())
            ops.dropout_forward(ctx, acts.res2, acts.res2, s.B, per_sample, s.drop_ffn_out);
        ops.residual_forward(ctx, acts.res2, acts.res2, acts.ln1_out, N * C);
        ln2.forward(y, acts.ln2, acts.res2, N);
    } else {
        ln1.forward(acts.ln1_out, acts.ln1, x, N);
        attn.forward(acts.res1, acts.attn, acts.ln1_out, s.B, s.T, s.tok, s.drop_probs);
        if (s.drop_attn_out.active())
            ops.dropout_forward(ctx, acts.res1, acts.res1, s.B, per_sample, s.drop_attn_out);
        ops.residual_forward(ctx, acts.res1, acts.res1, x, N * C);
        ln2.forward(acts.ln2_out, acts.ln2, acts.res1, N);
        mlp.forward(y, acts.mlp, acts.ln2_out, N);
        if (s.drop_ffn_out.active())
            ops.dropout_forward(ctx, y, y, s.B, per_sample, s.drop_ffn_out);
        ops.residual_forward(ctx, y, y, acts.res1, N * C);
    }
}

void TransformerBlock::backward(ActPtr dio, const Acts& acts, CActPtr x, const Step& s,
                                const Scratch& sc) const {
    const int64_t N = s.B * s.T;
    set_lora_dropout(s, nullptr);
    const NnOps& ops = ctx.nn();
    const int64_t per_sample = s.T * C;
    if (norm == NormPlacement::post) {
        ln2.backward(sc.t, dio, acts.res2, acts.ln2, N);
        CActPtr d_o = sc.t;
        if (s.drop_ffn_out.active()) {
            ops.dropout_backward(ctx, dio, sc.t, s.B, per_sample, s.drop_ffn_out);
            d_o = dio;
        }
        mlp.backward(sc.t, d_o, acts.mlp, acts.ln1_out, N, sc.dI, /*accumulate_dx=*/true);
        ln1.backward(dio, sc.t, acts.res1, acts.ln1, N);
        CActPtr d_a = dio;
        if (s.drop_attn_out.active()) {
            ops.dropout_backward(ctx, sc.t, dio, s.B, per_sample, s.drop_attn_out);
            d_a = sc.t;
        }
        attn.backward(dio, d_a, acts.attn, x, s.B, s.T, s.tok, s.drop_probs, sc.attn,
                      /*accumulate_dx=*/true);
    } else {
        // dio = d y = d r1 (residual) and the MLP branch's gradient.
        CActPtr d_o = dio;
        if (s.drop_ffn_out.active()) {
            ops.dropout_backward(ctx, sc.t, dio, s.B, per_sample, s.drop_ffn_out);
            d_o = sc.t;
        }
        mlp.backward(sc.u, d_o, acts.mlp, acts.ln2_out, N, sc.dI, /*accumulate_dx=*/false);
        ln2.backward(dio, sc.u, acts.res1, acts.ln2, N, /*accumulate_dx=*/true);
        CActPtr d_a = dio;
        if (s.drop_attn_out.active()) {
            ops.dropout_backward(ctx, sc.t, dio, s.B, per_sample, s.drop_attn_out);
            d_a = sc.t;
        }
        attn.backward(sc.u, d_a, acts.attn, acts.ln1_out, s.B, s.T, s.tok, s.drop_probs, sc.attn,
                      /*accumulate_dx=*/false);
        ln1.backward(dio, sc.u, x, acts.ln1, N, /*accumulate_dx=*/true);
    }
}

}  // namespace loom
