// One transformer layer: attention and MLP sublayers with residuals and
// LayerNorms, post-LN (BERT, RoBERTa, ALBERT, DistilBERT) or pre-LN (GPT-2).
//
//   post-LN: r1 = x + drop(attn(x));   h = ln1(r1);  r2 = h + drop(mlp(h));  y = ln2(r2)
//   pre-LN:  r1 = x + drop(attn(ln1(x)));            y = r1 + drop(mlp(ln2(r1)))
//
// The block's parameters are bound once; its saved activations (`Acts`) are
// per layer *application*, so ALBERT's shared layer runs L times over L sets of
// Acts while its gradients accumulate into one set of rows. Backward is the
// reverse list of op calls, with the residual gradient accumulated in place
// (`accumulate_dx`), so no buffer is copied. The block never knows about
// pipeline parallelism; tensor parallelism lives in its linears (shard).
#pragma once

#include <cstdint>

#include "nn/layer_norm.h"
#include "nn/mlp.h"
#include "nn/self_attention.h"

namespace loom {

enum class NormPlacement { post, pre };

struct TransformerBlock {
    NormPlacement norm = NormPlacement::post;
    int64_t C = 0, NH = 0, I = 0;  // NH and I local (/tp) once sharded; C never split
    SelfAttention attn;
    Mlp mlp;
    // post-LN: ln1 after attention, ln2 after the MLP. pre-LN: before each.
    LayerNorm ln1, ln2;
    OpCtx ctx;

    struct Acts {
        SelfAttention::Acts attn;
        Mlp::Acts mlp;
        LayerNorm::Acts ln1, ln2;
        ActPtr ln1_out;  // (B, T, C) post: MLP input; pre: attention input
        ActPtr res1;     // (B, T, C) x + attention branch
        ActPtr ln2_out;  // (B, T, C) pre-LN only: MLP input
        ActPtr res2;     // (B, T, C) post-LN only: ln2's input
    };
    // Backward workspace shared by all layers.
    struct Scratch {
        SelfAttention::Scratch attn;
        ActPtr dI;  // (B, T, I), gated MLP: (B, T, I + I/2)
        ActPtr t;   // (B, T, C)
        ActPtr u;   // (B, T, C)
        // C: the residual width; the attention and MLP parts take the block's
        // local sizes (tensor parallelism).
        void plan(ActArena& a, int64_t B, int64_t T, const TransformerBlock& blk, bool fused) {
            const int64_t C = blk.C, I = blk.I;
            const DType act = blk.ctx.act;
            attn.plan(a, B, T, blk.attn, act, fused);
            dI = a.take_act(B * T * (blk.mlp.gated ? I + blk.mlp.proj.in : I), act);
            t = a.take_act(B * T * C, act);
            u = a.take_act(B * T * C, act);
        }
    };
    // What changes per call: sizes, the mask and this application's dropout.
    struct Step {
        int64_t B = 0, T = 0;
        AttnTokens tok;  // padding mask, positions and document bounds
        DropoutSpec drop_probs, drop_attn_out, drop_ffn_out;
        LoraDropout lora;  // the LoRA adapters' keys (nn/lora.h); rows: null
    };

    // fused: attention through the table's fused entries (SelfAttention::Acts).
    void plan(Acts& acts, ActArena& a, int64_t B, int64_t T, bool fused) const;
    // Tensor parallelism: attention and MLP keep this rank's heads and I/tp
    // slice (before allocate); the LayerNorms and the residual stream stay
    // whole, replicated on tp. No-op for tp 1.
    void shard(ParamTable& t, const ModelTp& tp) {
        attn.shard(t, tp);
        mlp.shard(t, tp);
        NH = attn.NH;
        I = mlp.fc.out;
    }
    void bind(const ParamTable& t) {
        ctx = t.op_ctx();
        attn.bind(t);
        mlp.bind(t);
        ln1.bind(t);
        ln2.bind(t);
    }
    // y (B, T, C) from x (B, T, C); y must not alias x (x is saved for backward).
    void forward(ActPtr y, Acts& acts, CActPtr x, const Step& s) const;
    // dio (B, T, C): dy on entry, dx on return.
    void backward(ActPtr dio, const Acts& acts, CActPtr x, const Step& s,
                  const Scratch& sc) const;

    // Post-LN only (supports_rows): the layer computed at the positions `rows`
    // alone, for a last layer whose output the head reads there only. Keys and
    // values still see every position, so y's rows equal forward()'s there;
    // y's other rows are zero. backward_rows reads dio at those rows only and
    // overwrites all of it with dx. The Acts hold (M, ...) rows meanwhile.
    bool supports_rows() const {
        return norm == NormPlacement::post && ctx.nn().rows_supported();
    }
    // The linears' LoRA dropout keys for this call; `rows`: the positions the
    // attention output and MLP run on (forward_rows), null for all.
    void set_lora_dropout(const Step& s, const int64_t* rows) const {
        attn.qkv.lora_drop = s.lora;
        for (const Linear* l : {&attn.proj, &mlp.fc, &mlp.proj}) {
            l->lora_drop = s.lora;
            l->lora_drop.rows = rows;
        }
    }
    void forward_rows(ActPtr y, Acts& acts, CActPtr x, const Step& s,
                      const AttnRows& rows) const;
    void backward_rows(ActPtr dio, const Acts& acts, CActPtr x, const Step& s,
                       const Scratch& sc, const AttnRows& rows) const;
};

}  // namespace loom
