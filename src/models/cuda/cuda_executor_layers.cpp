// CudaExecutor: embeddings and transformer blocks, the CPU modules' op
// sequences (nn/transformer_block.cpp, nn/self_attention.cpp, nn/mlp.cpp,
// models/bert.cpp, models/gpt2.cpp) with the CUDA kernels, buffer for buffer,
// so a reader can hold the two side by side.
#include <cuda_runtime.h>

#include "core/check.h"
#include "models/cuda/cuda_executor.h"
#include "ops/cuda/activation_cuda.h"
#include "ops/cuda/attention_cuda.h"
#include "ops/cuda/dropout_cuda.h"
#include "ops/cuda/elementwise_cuda.h"
#include "ops/cuda/embedding_cuda.h"
#include "ops/cuda/flash_attention_cuda.h"
#include "ops/cuda/layer_norm_cuda.h"
#include "ops/cuda/matmul_cuda.h"
#include "ops/cuda/tp_vocab_cuda.h"

namespace loom {

// Tensor parallelism as nn/linear.cpp: a column-parallel linear's "f" is the
// identity forward, a row-parallel one sums its partial products on tp
// ("g") before the replicated bias, which would otherwise count tp times.
template <typename T>
void CudaExecutor<T>::linear_forward(const Linear& l, T* y, const T* x, int64_t N) {
    if (l.tp == nullptr || l.tp_role != TpRole::row) {
        matmul_forward_cuda<T>(y, x, P(l.weight), P(l.bias), N, l.in, l.out, l.layout, ctx_);
        return;
    }
    matmul_forward_cuda<T>(y, x, P(l.weight), nullptr, N, l.in, l.out, l.layout, ctx_);
    tp_all_reduce(y, N * l.out, grad_dtype(), ReduceOp::sum);
    add_bias_cuda<T>(y, P(l.bias), N, l.out, ctx_);
}

// Row parallel: "g" bwd is the identity (dy is replicated, the bias gradient
// the same on every rank). Column parallel: "f" bwd sums dx on tp; when dx
// already holds the residual stream's gradient (accumulate), only this
// branch's part may be summed, so it is computed apart, reduced, then added.
template <typename T>
void CudaExecutor<T>::linear_backward(const Linear& l, T* dx, const T* dy, const T* x, int64_t N,
                                      bool accumulate) {
    if (l.tp == nullptr || l.tp_role != TpRole::column || dx == nullptr) {
        matmul_backward_cuda<T>(dx, G(l.weight), G(l.bias), dy, x, P(l.weight), N, l.in, l.out,
                                l.layout, accumulate, ctx_);
        return;
    }
    T* part = accumulate ? tp_dx_ : dx;
    LOOM_ASSERT(!accumulate || l.in <= C_, "column-parallel dx of width {} > C {}", l.in, C_);
    matmul_backward_cuda<T>(part, G(l.weight), G(l.bias), dy, x, P(l.weight), N, l.in, l.out,
                            l.layout, false, ctx_);
    tp_all_reduce(part, N * l.in, grad_dtype(), ReduceOp::sum);
    if (accumulate) add_inplace_cuda<T>(dx, part, N * l.in, ctx_);
}

template <typename T>
void CudaExecutor<T>::norm_forward(const LayerNorm& n, T* y, float* mean, float* rstd, const T* x,
                                   int64_t N) {
    layer_norm_forward_cuda<T>(y, mean, rstd, x, P(n.weight), P(n.bias), N, n.C, n.eps, ctx_);
}

template <typename T>
void CudaExecutor<T>::norm_backward(const LayerNorm& n, T* dx, const T* dy, const T* x,
                                    const float* mean, const float* rstd, int64_t N,
                                    bool accumulate) {
    LOOM_CHECK(G(n.weight) != nullptr, "a frozen LayerNorm is not supported by the CUDA executor");
    layer_norm_backward_cuda<T>(dx, G(n.weight), G(n.bias), dy, x, P(n.weight), mean, rstd, N, n.C,
                                accumulate, ctx_);
}

// ---- embeddings ------------------------------------------------------------

template <typename T>
void CudaExecutor<T>::embed_forward(T* h0) {
    const EmbeddingsView& e = view_.embeddings;
    const int64_t N = N_, E = e.E;
    drop_emb_ = drop_.spec(e.dropout, 0, DropoutPlan::embeddings);
    // The word table comes first (it overwrites), so a vocab-parallel
    // lookup's all-reduce sees only its own rows.
    auto word_forward = [&](T* out) {
        if (e.word->tp)
            vocab_embed_forward(*e.word, out, ids_);
        else
            embedding_forward_cuda<T>(out, ids_, P(e.word->table), N, e.word->V, E, false, ctx_);
    };
    if (!e.norm) {
        // GPT-2: wte[ids] + wpe[pos], dropout.
        word_forward(h0);
        embedding_forward_cuda<T>(h0, pos_, P(e.position->table), N, e.position->V, E, true, ctx_);
        if (drop_emb_.active()) dropout_forward_cuda<T>(h0, h0, B_, T_ * E, drop_emb_, ctx_);
        return;
    }
    // Encoders, HF order: (word + token_type) + position, LayerNorm, dropout,
    // then ALBERT's E -> C mapping. Absent token types are type 0, as HF.
    word_forward(emb_sum_);
    if (e.token_type)
        embedding_forward_cuda<T>(emb_sum_, types_, P(e.token_type->table), N, e.token_type->V, E,
                                  true, ctx_);
    embedding_forward_cuda<T>(emb_sum_, pos_, P(e.position->table), N, e.position->V, E, true,
                              ctx_);
    T* out = e.mapping ? emb_out_ : h0;
    norm_forward(*e.norm, out, emb_mean_, emb_rstd_, emb_sum_, N);
    if (drop_emb_.active()) dropout_forward_cuda<T>(out, out, B_, T_ * E, drop_emb_, ctx_);
    if (e.mapping) linear_forward(*e.mapping, h0, emb_out_, N);
}

template <typename T>
void CudaExecutor<T>::embed_backward(T* dh0) {
    const EmbeddingsView& e = view_.embeddings;
    const int64_t N = N_, E = e.E;
    auto table_backward = [&](const Embedding* m, const int64_t* ids, const T* d) {
        if (m && m->tp) {
            vocab_embed_backward(*m, ids, d);
            return;
        }
        if (T* g = m ? G(m->table) : nullptr)
            embedding_backward_cuda<T>(g, ids, d, N, m->V, E, m->padding_idx, ctx_);
    };
    if (!e.norm) {
        if (drop_emb_.active()) dropout_backward_cuda<T>(dh0, dh0, B_, T_ * E, drop_emb_, ctx_);
        table_backward(e.word, ids_, dh0);
        table_backward(e.position, pos_, dh0);
        return;
    }
    T* dout = dh0;
    if (e.mapping) {
        linear_backward(*e.mapping, emb_dout_, dh0, emb_out_, N, false);
        dout = emb_dout_;
    }
    if (drop_emb_.active()) dropout_backward_cuda<T>(dout, dout, B_, T_ * E, drop_emb_, ctx_);
    norm_backward(*e.norm, emb_dsum_, dout, emb_sum_, emb_mean_, emb_rstd_, N, false);
    table_backward(e.word, ids_, emb_dsum_);
    if (e.token_type) table_backward(e.token_type, types_, emb_dsum_);
    table_backward(e.position, pos_, emb_dsum_);
}

// ---- attention and MLP -----------------------------------------------------

template <typename T>
typename CudaExecutor<T>::Step CudaExecutor<T>::step_for(int64_t app) const {
    const uint32_t layer = uint32_t(app + 1);
    Step s;
    s.probs = drop_.spec(config_.attention_dropout, layer, DropoutPlan::attn_probs);
    s.attn_out = drop_.spec(config_.hidden_dropout, layer, DropoutPlan::attn_out);
    s.ffn_out = drop_.spec(config_.hidden_dropout, layer, DropoutPlan::ffn_out);
    return s;
}

template <typename T>
void CudaExecutor<T>::attention_forward(const SelfAttention& m, T* y, BlockActs& a, const T* x,
                                        const Step& s) {
    const int64_t C = m.C;
    linear_forward(m.qkv, a.qkv, x, N_);
    const AttnShape shape{B_, T_, m.NH, C / m.NH, m.head_offset, m.NH_total};
    const AttnMask mask{has_mask_ ? mask_ : nullptr, m.causal};
    if (flash_)
        flash_attention_forward_cuda<T>(a.ctx, a.lse, a.qkv, a.qkv + C, a.qkv + 2 * C, 3 * C, shape,
                                        mask, s.probs, ctx_);
    else
        attention_forward_cuda<T>(a.ctx, a.att, a.qkv, a.qkv + C, a.qkv + 2 * C, 3 * C, shape, mask,
                                  s.probs, ctx_);
    linear_forward(m.proj, y, a.ctx, N_);
}

template <typename T>
void CudaExecutor<T>::attention_backward(const SelfAttention& m, T* dx, const T* dy,
                                         const BlockActs& a, const T* x, const Step& s,
                                         bool accumulate) {
    const int64_t C = m.C;
    linear_backward(m.proj, dctx_, dy, a.ctx, N_, false);
    const AttnShape shape{B_, T_, m.NH, C / m.NH, m.head_offset, m.NH_total};
    const AttnMask mask{has_mask_ ? mask_ : nullptr, m.causal};
    if (flash_)
        flash_attention_backward_cuda<T>(dqkv_, dqkv_ + C, dqkv_ + 2 * C, dctx_, a.ctx, a.lse,
                                         a.qkv, a.qkv + C, a.qkv + 2 * C, 3 * C, shape, mask,
                                         s.probs, ctx_);
    else
        attention_backward_cuda<T>(dqkv_, dqkv_ + C, dqkv_ + 2 * C, datt_, dctx_, a.att, a.qkv,
                                   a.qkv + C, a.qkv + 2 * C, 3 * C, shape, mask, s.probs, ctx_);
    linear_backward(m.qkv, dx, dqkv_, x, N_, accumulate);
}

template <typename T>
void CudaExecutor<T>::mlp_forward(const Mlp& m, T* y, BlockActs& a, const T* x) {
    // The first linear, its bias and the activation in one call (cuBLASLt's
    // GELU epilogue where it applies); the pre-activation is kept for backward.
    LOOM_CHECK(m.fc.bias.defined(), "the CUDA executor expects a biased MLP input linear");
    matmul_bias_act_forward_cuda<T>(a.fc_act, a.fc_pre, x, P(m.fc.weight), P(m.fc.bias), N_,
                                    m.fc.in, m.fc.out, m.fc.layout, m.act, ctx_);
    linear_forward(m.proj, y, a.fc_act, N_);
}

template <typename T>
void CudaExecutor<T>::mlp_backward(const Mlp& m, T* dx, const T* dy, const BlockActs& a, const T* x,
                                   bool accumulate) {
    linear_backward(m.proj, dI_, dy, a.fc_act, N_, false);
    activation_backward_cuda<T>(dI_, a.fc_pre, dI_, N_ * m.fc.out, m.act, ctx_);
    linear_backward(m.fc, dx, dI_, x, N_, accumulate);
}

// ---- transformer block (nn/transformer_block.cpp has the buffer choreography) ----

template <typename T>
void CudaExecutor<T>::block_forward(const TransformerBlock& b, T* y, BlockActs& a, const T* x,
                                    const Step& s) {
    const int64_t N = N_, C = b.C, per_sample = T_ * C;
    if (b.norm == NormPlacement::post) {
        attention_forward(b.attn, a.res1, a, x, s);
        if (s.attn_out.active())
            dropout_forward_cuda<T>(a.res1, a.res1, B_, per_sample, s.attn_out, ctx_);
        residual_forward_cuda<T>(a.res1, a.res1, x, N * C, ctx_);
        norm_forward(b.ln1, a.ln1_out, a.ln1_mean, a.ln1_rstd, a.res1, N);
        mlp_forward(b.mlp, a.ln2_in, a, a.ln1_out);
        if (s.ffn_out.active())
            dropout_forward_cuda<T>(a.ln2_in, a.ln2_in, B_, per_sample, s.ffn_out, ctx_);
        residual_forward_cuda<T>(a.ln2_in, a.ln2_in, a.ln1_out, N * C, ctx_);
        norm_forward(b.ln2, y, a.ln2_mean, a.ln2_rstd, a.ln2_in, N);
        return;
    }
    norm_forward(b.ln1, a.ln1_out, a.ln1_mean, a.ln1_rstd, x, N);
    attention_forward(b.attn, a.res1, a, a.ln1_out, s);
    if (s.attn_out.active())
        dropout_forward_cuda<T>(a.res1, a.res1, B_, per_sample, s.attn_out, ctx_);
    residual_forward_cuda<T>(a.res1, a.res1, x, N * C, ctx_);
    norm_forward(b.ln2, a.ln2_in, a.ln2_mean, a.ln2_rstd, a.res1, N);
    mlp_forward(b.mlp, y, a, a.ln2_in);
    if (s.ffn_out.active()) dropout_forward_cuda<T>(y, y, B_, per_sample, s.ffn_out, ctx_);
    residual_forward_cuda<T>(y, y, a.res1, N * C, ctx_);
}

template <typename T>
void CudaExecutor<T>::block_backward(const TransformerBlock& b, T* dio, const BlockActs& a,
                                     const T* x, const Step& s) {
    const int64_t N = N_, C = b.C, per_sample = T_ * C;
    if (b.norm == NormPlacement::post) {
        norm_backward(b.ln2, t_, dio, a.ln2_in, a.ln2_mean, a.ln2_rstd, N, false);
        const T* d_o = t_;
        if (s.ffn_out.active()) {
            dropout_backward_cuda<T>(dio, t_, B_, per_sample, s.ffn_out, ctx_);
            d_o = dio;
        }
        mlp_backward(b.mlp, t_, d_o, a, a.ln1_out, /*accumulate=*/true);
        norm_backward(b.ln1, dio, t_, a.res1, a.ln1_mean, a.ln1_rstd, N, false);
        const T* d_a = dio;
        if (s.attn_out.active()) {
            dropout_backward_cuda<T>(t_, dio, B_, per_sample, s.attn_out, ctx_);
            d_a = t_;
        }
        attention_backward(b.attn, dio, d_a, a, x, s, /*accumulate=*/true);
        return;
    }
    const T* d_o = dio;
    if (s.ffn_out.active()) {
        dropout_backward_cuda<T>(t_, dio, B_, per_sample, s.ffn_out, ctx_);
        d_o = t_;
    }
    mlp_backward(b.mlp, u_, d_o, a, a.ln2_in, /*accumulate=*/false);
    norm_backward(b.ln2, dio, u_, a.res1, a.ln2_mean, a.ln2_rstd, N, /*accumulate=*/true);
    const T* d_a = dio;
    if (s.attn_out.active()) {
        dropout_backward_cuda<T>(t_, dio, B_, per_sample, s.attn_out, ctx_);
        d_a = t_;
    }
    attention_backward(b.attn, u_, d_a, a, a.ln1_out, s, /*accumulate=*/false);
    norm_backward(b.ln1, dio, u_, x, a.ln1_mean, a.ln1_rstd, N, /*accumulate=*/true);
}

// The class is instantiated in cuda_executor.cpp; these members live here.
#define LOOM_INSTANTIATE(T)                                                                        \
    template void CudaExecutor<T>::linear_forward(const Linear&, T*, const T*, int64_t);           \
    template void CudaExecutor<T>::linear_backward(const Linear&, T*, const T*, const T*, int64_t, \
                                                   bool);                                          \
    template void CudaExecutor<T>::norm_forward(const LayerNorm&, T*, float*, float*, const T*,    \
                                                int64_t);                                          \
    template void CudaExecutor<T>::norm_backward(const LayerNorm&, T*, const T*, const T*,         \
                                                 const float*, const float*, int64_t, bool);       \
    template void CudaExecutor<T>::embed_forward(T*);                                              \
    template void CudaExecutor<T>::embed_backward(T*);                                             \
    template CudaExecutor<T>::Step CudaExecutor<T>::step_for(int64_t) const;                       \
    template void CudaExecutor<T>::attention_forward(const SelfAttention&, T*, BlockActs&,         \
                                                     const T*, const Step&);                       \
    template void CudaExecutor<T>::attention_backward(                                             \
        const SelfAttention&, T*, const T*, const BlockActs&, const T*, const Step&, bool);        \
    template void CudaExecutor<T>::mlp_forward(const Mlp&, T*, BlockActs&, const T*);              \
    template void CudaExecutor<T>::mlp_backward(const Mlp&, T*, const T*, const BlockActs&,        \
                                                const T*, bool);                                   \
    template void CudaExecutor<T>::block_forward(const TransformerBlock&, T*, BlockActs&,          \
                                                 const T*, const Step&);                           \
    template void CudaExecutor<T>::block_backward(const TransformerBlock&, T*, const BlockActs&,   \
                                                  const T*, const Step&);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

}  // namespace loom
