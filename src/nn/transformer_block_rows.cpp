// A post-LN transformer block at a subset of positions (the last layer under a
// head that reads a few rows). After the attention, every op is row-wise, so
// proj, the residuals, both LayerNorms and the MLP run on the M gathered rows;
// only the QKV projection and the keys/values cover all B * T positions.
// Dropout takes each row's own elements of the full-batch mask (dropout_rows),
// so with the same seed the rows equal the whole-sequence block's.
//
// Backward (dio (B, T, C): dy at the rows on entry, dx on return):
//   u = dy[rows];  t = ln2'(u)            d r2
//   d_o = drop'(t) -> u, or t             d mlp output
//   t += mlp'(d_o)                        d h = d r2 + d mlp input
//   u = ln1'(t)                           d r1
//   d_a = drop'(u) -> t, or u             d attention output
//   dio = attn'(d_a);  dio[rows] += u     d x = d qkv input + d r1 (residual)
#include <algorithm>

#include "core/check.h"
#include "nn/transformer_block.h"
#include "ops/device_ops.h"

namespace loom {

void TransformerBlock::forward_rows(ActPtr y, Acts& acts, CActPtr x, const Step& s,
                                    const AttnRows& r) const {
    LOOM_ASSERT(supports_rows(), "forward_rows: only post-LN blocks run on a subset of rows");
    set_lora_dropout(s, r.rows);
    const int64_t M = r.M;
    const NnOps& ops = ctx.nn();
    attn.forward_rows(acts.res1, acts.attn, x, s.B, s.T, s.tok, s.drop_probs, r);
    if (s.drop_attn_out.active())
        ops.dropout_rows(ctx, acts.res1, acts.res1, r.rows, M, s.T, C, s.drop_attn_out);
    for (int64_t i = 0; i < M; ++i) ops.add_inplace(ctx, acts.res1 + i * C, x + r.rows[i] * C, C);
    ln1.forward(acts.ln1_out, acts.ln1, acts.res1, M);
    mlp.forward(acts.res2, acts.mlp, acts.ln1_out, M);
    if (s.drop_ffn_out.active())
        ops.dropout_rows(ctx, acts.res2, acts.res2, r.rows, M, s.T, C, s.drop_ffn_out);
    ops.residual_forward(ctx, acts.res2, acts.res2, acts.ln1_out, M * C);
    ln2.forward(y, acts.ln2, acts.res2, M);
    // Spread the M packed rows to their positions, last first: rows[i] >= i,
    // so no packed row is overwritten before it moves.
    const size_t row_bytes = size_t(C) * dtype_size(ctx.act);
    for (int64_t i = M; i-- > 0;)
        if (r.rows[i] != i) ctx.be->copy(y + r.rows[i] * C, y + i * C, row_bytes);
    int64_t next = 0;  // zero the rows the head does not read
    for (int64_t n = 0; n < s.B * s.T; ++n) {
        if (next < M && r.rows[next] == n) {
            ++next;
            continue;
        }
        ctx.be->zero(y + n * C, row_bytes);
    }
}

void TransformerBlock::backward_rows(ActPtr dio, const Acts& acts, CActPtr x, const Step& s,
                                     const Scratch& sc, const AttnRows& r) const {
    LOOM_ASSERT(supports_rows(), "backward_rows: only post-LN blocks run on a subset of rows");
    set_lora_dropout(s, r.rows);
    const int64_t M = r.M;
    const NnOps& ops = ctx.nn();
    const size_t row_bytes = size_t(C) * dtype_size(ctx.act);
    for (int64_t i = 0; i < M; ++i) ctx.be->copy(sc.u + i * C, dio + r.rows[i] * C, row_bytes);
    ln2.backward(sc.t, sc.u, acts.res2, acts.ln2, M);
    CActPtr d_o = sc.t;
    if (s.drop_ffn_out.active()) {
        ops.dropout_rows(ctx, sc.u, sc.t, r.rows, M, s.T, C, s.drop_ffn_out);
        d_o = sc.u;
    }
    mlp.backward(sc.t, d_o, acts.mlp, acts.ln1_out, M, sc.dI, /*accumulate_dx=*/true);
    ln1.backward(sc.u, sc.t, acts.res1, acts.ln1, M);
    CActPtr d_a = sc.u;
    if (s.drop_attn_out.active()) {
        ops.dropout_rows(ctx, sc.t, sc.u, r.rows, M, s.T, C, s.drop_attn_out);
        d_a = sc.t;
    }
    attn.backward_rows(dio, d_a, acts.attn, x, s.B, s.T, s.tok, s.drop_probs, sc.attn, r);
    for (int64_t i = 0; i < M; ++i) ops.add_inplace(ctx, dio + r.rows[i] * C, sc.u + i * C, C);
}

}  // namespace loom
