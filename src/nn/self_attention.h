// Multi-head self-attention: packed QKV projection, masked softmax attention,
// output projection.
//
// The QKV linear produces (B, T, 3C) with q, k, v at column offsets 0, C, 2C
// (BERT's fused query/key/value rows, or GPT-2's c_attn), which the attention
// op reads in place with row stride 3C: no split, no copy.
//
// Tensor parallelism (shard): qkv is column-parallel by heads and proj
// row-parallel (Megatron's attention pairing: one all-reduce on tp per
// direction, inside the linears). The module then runs NH/tp local heads over
// C/tp local features; head_offset and NH_total tell the attention op which
// global heads these are, so attention dropout draws the 1-rank masks.
//
// Llama-family attention (NKV, rope): the packed projection is [q: NH heads |
// k: NKV heads | v: NKV heads]. RoPE turns q and k in place right after the
// projection (ops/rope.h). Grouped-query attention (NKV < NH) then expands k
// and v to NH heads (HF's repeat_kv, ops/repeat_kv.h) into acts.qkv_full, the
// (B, T, 3C) rows the same attention entries read, and backward sums each
// group's gradients back into its kv head. That costs the expanded copy; it
// buys one attention path for every family and every device. Tensor
// parallelism keeps whole groups: NH and NKV are split alike, so a rank's
// query heads find their kv heads on the same rank.
#pragma once

#include <cstdint>

#include "nn/linear.h"
#include "ops/attention_rows.h"
#include "ops/dropout.h"
#include "ops/rope.h"

namespace loom {

// What attention reads per token of a batch, (B, T) each in the backend's
// memory, null when absent.
struct AttnTokens {
    const int64_t* key_padding = nullptr;  // 1 = token, 0 = padding
    // Packed documents: each token's position in its document (rotary
    // embeddings; null: 0 .. T-1) and the first key it may see
    // (AttnMask::key_start; null: 0).
    const int64_t* positions = nullptr;
    const int64_t* key_start = nullptr;
};

struct SelfAttention {
    int64_t C = 0, NH = 0;    // local: C/tp features, NH/tp heads once sharded
    int64_t head_offset = 0;  // global index of local head 0
    int64_t NH_total = 0;     // global head count; 0: NH (not sharded)
    int64_t NKV = 0;          // key/value heads (local); 0: NH (no grouping)
    RopeSpec rope;            // rotary embeddings on q and k; inactive: none
    bool causal = false;
    int64_t window = -1;      // Mistral's sliding window (AttnMask::window); -1: none
    // bf16: attention's own GEMMs take bf16 operands (ops/attention.h), as the
    // linears' do. fp16 is not emulated here: attention then stays fp32.
    DType compute = DType::f32;
    Linear qkv;   // C -> 3C
    Linear proj;  // C -> C
    OpCtx ctx;

    // fused: the table's fused attention (NnOps::fused_attention_forward)
    // runs, keeping lse instead of att; the model decides per batch. A
    // sliding window always takes the unfused entries (fused_ok).
    bool fused_ok(bool fused) const { return fused && window < 0; }
    int64_t kv_heads() const { return NKV > 0 ? NKV : NH; }
    // Whether k and v are expanded to NH heads before attention.
    bool grouped() const { return kv_heads() != NH; }

    struct Acts {
        ActPtr qkv;            // (B, T, qkv.out): 3C, or C + 2 NKV d when grouped
        ActPtr qkv_full;       // (B, T, 3C) what attention reads: qkv, or its expansion
        ActPtr att;            // (B, NH, T, T) softmax probabilities; null when fused
        float* lse = nullptr;  // (B, NH, T) log-sum-exp of the scaled scores; fused only
        ActPtr ctx;            // (B, T, C) attention output, before proj
        // bf16 compute only: the linears' inputs as forward rounded them.
        uint16_t* x16 = nullptr;    // (B, T, qkv.in)
        uint16_t* ctx16 = nullptr;  // (B, T, C)
        void plan(ActArena& a, int64_t B, int64_t T, const SelfAttention& m, bool fused) {
            const DType t = m.ctx.act;
            fused = m.fused_ok(fused);
            qkv = a.take_act(B * T * m.qkv.out, t);
            qkv_full = m.grouped() ? a.take_act(B * T * 3 * m.C, t) : qkv;
            att = fused ? ActPtr() : a.take_act(B * m.NH * T * T, t);
            lse = fused ? a.take(B * m.NH * T) : nullptr;
            ctx = a.take_act(B * T * m.C, t);
            x16 = m.qkv.rounds_operands() ? a.take16(B * T * m.qkv.in) : nullptr;
            ctx16 = m.proj.rounds_operands() ? a.take16(B * T * m.proj.in) : nullptr;
        }
    };
    // Backward workspace, shared by every layer.
    struct Scratch {
        ActPtr dqkv;       // (B, T, qkv.out)
        ActPtr dqkv_full;  // (B, T, 3C): dqkv, or the expanded rows' gradient
        ActPtr datt;       // (B, NH, T, T); null when fused
        ActPtr dctx;       // (B, T, C)
        void plan(ActArena& a, int64_t B, int64_t T, const SelfAttention& m, DType t, bool fused) {
            const int64_t C = m.C, NH = m.NH;
            fused = m.fused_ok(fused);
            dqkv = a.take_act(B * T * m.qkv.out, t);
            dqkv_full = m.grouped() ? a.take_act(B * T * 3 * C, t) : dqkv;
            datt = fused ? ActPtr() : a.take_act(B * NH * T * T, t);
            dctx = a.take_act(B * T * C, t);
        }
    };

    // This rank's heads (before allocate); no-op for tp 1.
    void shard(ParamTable& t, const ModelTp& tp);
    void bind(const ParamTable& t) {
        ctx = t.op_ctx();
        qkv.bind(t);
        proj.bind(t);
    }
    // y (B, T, C) = proj(attention(qkv(x))).
    void forward(ActPtr y, Acts& acts, CActPtr x, int64_t B, int64_t T, const AttnTokens& tok,
                 const DropoutSpec& drop_probs) const;
    // dx (B, T, C): overwritten, or accumulated into when accumulate_dx.
    void backward(ActPtr dx, CActPtr dy, const Acts& acts, CActPtr x, int64_t B, int64_t T,
                  const AttnTokens& tok, const DropoutSpec& drop_probs, const Scratch& s,
                  bool accumulate_dx) const;

    // The same at the query rows `rows` only (ops/attention_rows.h): keys and
    // values from every position, y (M, C) at those rows; acts.ctx holds
    // (M, C) and acts.att (M, NH, T). Backward takes dy (M, C) and overwrites
    // dx (B, T, C) (the residual's part is the caller's).
    void forward_rows(ActPtr y, Acts& acts, CActPtr x, int64_t B, int64_t T, const AttnTokens& tok,
                      const DropoutSpec& drop_probs, const AttnRows& rows) const;
    void backward_rows(ActPtr dx, CActPtr dy, const Acts& acts, CActPtr x, int64_t B, int64_t T,
                       const AttnTokens& tok, const DropoutSpec& drop_probs, const Scratch& s,
                       const AttnRows& rows) const;

  private:
    void prepare_qkv(const Acts& acts, int64_t B, int64_t T, const int64_t* positions) const;
    void finish_dqkv(const Scratch& s, int64_t B, int64_t T, const int64_t* positions) const;
    AttnMask mask_of(const AttnTokens& tok) const {
        return AttnMask{tok.key_padding, causal, window, tok.key_start};
    }
};

}  // namespace loom
