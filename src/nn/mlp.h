// Feed-forward block: fc (C -> I), activation, proj (I -> C).
// Gated (the Llama family's SwiGLU): fc is the fused gate|up projection
// (C -> 2I, Linear::make_fused), then silu(gate) * up (ops/swiglu.h), then
// proj (I -> C). Tensor parallelism splits gate and up alike, so a rank's
// gate and up columns stay paired.
#pragma once

#include <cstdint>

#include "nn/linear.h"
#include "ops/activation.h"

namespace loom {

struct Mlp {
    Linear fc;    // C -> I
    Linear proj;  // I -> C
    Activation act = Activation::gelu_erf;  // unused when gated
    bool gated = false;                      // SwiGLU: fc.out = 2 proj.in
    OpCtx ctx;

    // Under bf16 compute the post-activation is only ever read by proj, as
    // bf16: it is stored rounded (act16), with no fp32 copy.
    struct Acts {
        ActPtr fc;   // (N, fc.out) pre-activation (gated: gate | up)
        ActPtr act;  // (N, proj.in) post-activation (proj's input); unless act16
        // bf16 compute only: the linears' inputs in bf16.
        uint16_t* x16 = nullptr;    // (N, C) as fc's forward rounded it
        uint16_t* act16 = nullptr;  // (N, I) post-activation
        void plan(ActArena& a, int64_t N, const Mlp& m) {
            const bool bf16 = m.fc.rounds_operands() && m.proj.rounds_operands();
            fc = a.take_act(N * m.fc.out, m.ctx.act);
            act = bf16 ? ActPtr() : a.take_act(N * m.proj.in, m.ctx.act);
            x16 = bf16 ? a.take16(N * m.fc.in) : nullptr;
            act16 = bf16 ? a.take16(N * m.proj.in) : nullptr;
        }
    };

    // Megatron's MLP pairing (fc column-, proj row-parallel): this rank's
    // I/tp slice (before allocate); no-op for tp 1.
    void shard(ParamTable& t, const ModelTp& tp) {
        fc.shard(t, tp);
        proj.shard(t, tp);
    }
    void bind(const ParamTable& t) {
        ctx = t.op_ctx();
        fc.bind(t);
        proj.bind(t);
    }
    void forward(ActPtr y, Acts& acts, CActPtr x, int64_t N) const;
    // dI (N, fc.out), gated (N, fc.out + proj.in), is workspace; dx
    // overwritten or accumulated (accumulate_dx).
    void backward(ActPtr dx, CActPtr dy, const Acts& acts, CActPtr x, int64_t N, ActPtr dI,
                  bool accumulate_dx) const;
};

}  // namespace loom
