// Self-attention forward/backward as op calls.
#include "nn/self_attention.h"

#include "core/check.h"
#include "ops/device_ops.h"

namespace loom {

void SelfAttention::shard(ParamTable& t, const ModelTp& tp) {
    if (!tp.active()) return;
    LOOM_CHECK(NH % tp.size == 0,
               "tensor_parallel_degree {} does not divide the {} attention heads", tp.size, NH);
    qkv.shard(t, tp);
    proj.shard(t, tp);
    NH_total = NH;
    NH /= tp.size;
    head_offset = int64_t(tp.rank) * NH;
    C /= tp.size;
}

void SelfAttention::forward(ActPtr y, Acts& acts, CActPtr x, int64_t B, int64_t T,
                            const int64_t* key_padding, const DropoutSpec& drop_probs) const {
    const int64_t N = B * T;
    qkv.forward(acts.qkv, x, N, acts.x16);
    const AttnShape shape{B, T, NH, C / NH, head_offset, NH_total};
    const AttnMask mask{key_padding, causal};
    if (acts.lse)
        ctx.nn().fused_attention_forward(ctx, compute, acts.ctx, acts.lse, acts.qkv, acts.qkv + C,
                                         acts.qkv + 2 * C, 3 * C, shape, mask, drop_probs);
    else
        ctx.nn().attention_forward(ctx, compute, acts.ctx, acts.att, acts.qkv, acts.qkv + C,
                                   acts.qkv + 2 * C, 3 * C, shape, mask, drop_probs);
    proj.forward(y, acts.ctx, N, acts.ctx16);
}

void SelfAttention::backward(ActPtr dx, CActPtr dy, const Acts& acts, CActPtr x,
                             int64_t B, int64_t T, const int64_t* key_padding,
                             const DropoutSpec& drop_probs, const Scratch& s,
                             bool accumulate_dx) const {
    const int64_t N = B * T;
    proj.backward(s.dctx, dy, acts.ctx, N, false, acts.ctx16);
    const AttnShape shape{B, T, NH, C / NH, head_offset, NH_total};
    const AttnMask mask{key_padding, causal};
    if (acts.lse)
        ctx.nn().fused_attention_backward(ctx, compute, s.dqkv, s.dqkv + C, s.dqkv + 2 * C, s.dctx,
                                          acts.ctx, acts.lse, acts.qkv, acts.qkv + C,
                                          acts.qkv + 2 * C, 3 * C, shape, mask, drop_probs);
    else
        ctx.nn().attention_backward(ctx, compute, s.dqkv, s.dqkv + C, s.dqkv + 2 * C, s.datt,
                                    s.dctx, acts.att, acts.qkv, acts.qkv + C, acts.qkv + 2 * C,
                                    3 * C, shape, mask, drop_probs);
    qkv.backward(dx, s.dqkv, x, N, accumulate_dx, acts.x16);
}

void SelfAttention::forward_rows(ActPtr y, Acts& acts, CActPtr x, int64_t B, int64_t T,
                                 const int64_t* key_padding, const DropoutSpec& drop_probs,
                                 const AttnRows& rows) const {
    qkv.forward(acts.qkv, x, B * T, acts.x16);
    const AttnShape shape{B, T, NH, C / NH, head_offset, NH_total};
    const AttnMask mask{key_padding, causal};
    ctx.nn().attention_rows_forward(ctx, acts.ctx, acts.att, acts.qkv, acts.qkv + C,
                                    acts.qkv + 2 * C, 3 * C, shape, mask, drop_probs, rows);
    proj.forward(y, acts.ctx, rows.M, acts.ctx16);
}

void SelfAttention::backward_rows(ActPtr dx, CActPtr dy, const Acts& acts, CActPtr x,
                                  int64_t B, int64_t T, const int64_t* key_padding,
                                  const DropoutSpec& drop_probs, const Scratch& s,
                                  const AttnRows& rows) const {
    proj.backward(s.dctx, dy, acts.ctx, rows.M, false, acts.ctx16);
    const AttnShape shape{B, T, NH, C / NH, head_offset, NH_total};
    const AttnMask mask{key_padding, causal};
    ctx.nn().attention_rows_backward(ctx, s.dqkv, s.dqkv + C, s.dqkv + 2 * C, s.datt, s.dctx,
                                     acts.att, acts.qkv, acts.qkv + C, acts.qkv + 2 * C, 3 * C,
                                     shape, mask, drop_probs, rows);
    qkv.backward(dx, s.dqkv, x, B * T, /*accumulate_dx=*/false, acts.x16);
}

}  // namespace loom
