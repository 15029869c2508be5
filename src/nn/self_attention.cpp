// Self-attention forward/backward as op calls.
#include "nn/self_attention.h"

#include "core/check.h"
#include "ops/device_ops.h"

namespace loom {

void SelfAttention::shard(ParamTable& t, const ModelTp& tp) {
    if (!tp.active()) return;
    LOOM_CHECK(NH % tp.size == 0,
               "tensor_parallel_degree {} does not divide the {} attention heads", tp.size, NH);
    LOOM_CHECK(kv_heads() % tp.size == 0,
               "tensor_parallel_degree {} does not divide the {} key/value heads "
               "(num_key_value_heads): each rank must hold whole query groups",
               tp.size, kv_heads());
    qkv.shard(t, tp);
    proj.shard(t, tp);
    if (NKV > 0) NKV /= tp.size;
    NH_total = NH;
    NH /= tp.size;
    head_offset = int64_t(tp.rank) * NH;
    C /= tp.size;
}

// q and k turned in place after the projection; k and v expanded to every
// query head when grouped (the header says why).
void SelfAttention::prepare_qkv(const Acts& acts, int64_t B, int64_t T,
                                const int64_t* positions) const {
    const int64_t d = C / NH, ld = qkv.out;
    if (rope.active()) {
        ctx.nn().rope(ctx, acts.qkv, ld, B, T, NH, d, rope, /*inverse=*/false, positions);
        ctx.nn().rope(ctx, acts.qkv + C, ld, B, T, kv_heads(), d, rope, /*inverse=*/false,
                      positions);
    }
    if (grouped()) ctx.nn().repeat_kv_forward(ctx, acts.qkv_full, acts.qkv, B * T, NH, NKV, d);
}

// The reverse: group sums into dqkv, then the inverse turn.
void SelfAttention::finish_dqkv(const Scratch& s, int64_t B, int64_t T,
                                const int64_t* positions) const {
    const int64_t d = C / NH, ld = qkv.out;
    if (grouped()) ctx.nn().repeat_kv_backward(ctx, s.dqkv, s.dqkv_full, B * T, NH, NKV, d);
    if (rope.active()) {
        ctx.nn().rope(ctx, s.dqkv, ld, B, T, NH, d, rope, /*inverse=*/true, positions);
        ctx.nn().rope(ctx, s.dqkv + C, ld, B, T, kv_heads(), d, rope, /*inverse=*/true, positions);
    }
}

void SelfAttention::forward(ActPtr y, Acts& acts, CActPtr x, int64_t B, int64_t T,
                            const AttnTokens& tok, const DropoutSpec& drop_probs) const {
    const int64_t N = B * T;
    qkv.forward(acts.qkv, x, N, acts.x16);
    prepare_qkv(acts, B, T, tok.positions);
    const AttnShape shape{B, T, NH, C / NH, head_offset, NH_total};
    const AttnMask mask = mask_of(tok);
    if (acts.lse)
        ctx.nn().fused_attention_forward(ctx, compute, acts.ctx, acts.lse, acts.qkv_full,
                                         acts.qkv_full + C, acts.qkv_full + 2 * C, 3 * C, shape,
                                         mask, drop_probs);
    else
        ctx.nn().attention_forward(ctx, compute, acts.ctx, acts.att, acts.qkv_full,
                                   acts.qkv_full + C, acts.qkv_full + 2 * C, 3 * C, shape, mask,
                                   drop_probs);
    proj.forward(y, acts.ctx, N, acts.ctx16);
}

void SelfAttention::backward(ActPtr dx, CActPtr dy, const Acts& acts, CActPtr x, int64_t B,
                             int64_t T, const AttnTokens& tok, const DropoutSpec& drop_probs,
                             const Scratch& s, bool accumulate_dx) const {
    const int64_t N = B * T;
    proj.backward(s.dctx, dy, acts.ctx, N, false, acts.ctx16);
    const AttnShape shape{B, T, NH, C / NH, head_offset, NH_total};
    const AttnMask mask = mask_of(tok);
    if (acts.lse)
        ctx.nn().fused_attention_backward(ctx, compute, s.dqkv_full, s.dqkv_full + C,
                                          s.dqkv_full + 2 * C, s.dctx, acts.ctx, acts.lse,
                                          acts.qkv_full, acts.qkv_full + C, acts.qkv_full + 2 * C,
                                          3 * C, shape, mask, drop_probs);
    else
        ctx.nn().attention_backward(ctx, compute, s.dqkv_full, s.dqkv_full + C, s.dqkv_full + 2 * C,
                                    s.datt, s.dctx, acts.att, acts.qkv_full, acts.qkv_full + C,
                                    acts.qkv_full + 2 * C, 3 * C, shape, mask, drop_probs);
    finish_dqkv(s, B, T, tok.positions);
    qkv.backward(dx, s.dqkv, x, N, accumulate_dx, acts.x16);
}

void SelfAttention::forward_rows(ActPtr y, Acts& acts, CActPtr x, int64_t B, int64_t T,
                                 const AttnTokens& tok, const DropoutSpec& drop_probs,
                                 const AttnRows& rows) const {
    LOOM_ASSERT(!rope.active() && !grouped(),
                "attention at selected rows takes neither rotary embeddings nor grouped heads");
    qkv.forward(acts.qkv, x, B * T, acts.x16);
    const AttnShape shape{B, T, NH, C / NH, head_offset, NH_total};
    const AttnMask mask = mask_of(tok);
    ctx.nn().attention_rows_forward(ctx, acts.ctx, acts.att, acts.qkv, acts.qkv + C,
                                    acts.qkv + 2 * C, 3 * C, shape, mask, drop_probs, rows);
    proj.forward(y, acts.ctx, rows.M, acts.ctx16);
}

void SelfAttention::backward_rows(ActPtr dx, CActPtr dy, const Acts& acts, CActPtr x, int64_t B,
                                  int64_t T, const AttnTokens& tok, const DropoutSpec& drop_probs,
                                  const Scratch& s, const AttnRows& rows) const {
    proj.backward(s.dctx, dy, acts.ctx, rows.M, false, acts.ctx16);
    const AttnShape shape{B, T, NH, C / NH, head_offset, NH_total};
    const AttnMask mask = mask_of(tok);
    ctx.nn().attention_rows_backward(ctx, s.dqkv, s.dqkv + C, s.dqkv + 2 * C, s.datt, s.dctx,
                                     acts.att, acts.qkv, acts.qkv + C, acts.qkv + 2 * C, 3 * C,
                                     shape, mask, drop_probs, rows);
    qkv.backward(dx, s.dqkv, x, B * T, /*accumulate_dx=*/false, acts.x16);
}

}  // namespace loom
