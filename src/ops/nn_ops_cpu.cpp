// The CPU's NnOps (ops/nn_ops.h): the ops/<op>.h kernels on f32
// activations. A GEMM rounds its operands to the compute type (bf16 or fp16
// with f32 accumulation, as autocast); attention's own GEMMs do so for bf16
// only, fp16 attention staying f32 (nothing on the CPU emulates it there).
#include "core/check.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/attention_rows.h"
#include "ops/device_ops.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layer_norm.h"
#include "ops/matmul.h"
#include "ops/repeat_kv.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/softmax_xent.h"
#include "ops/swiglu.h"
#include "ops/vocab_parallel.h"

namespace loom {

namespace {

// Activations, parameters and gradients are f32 on the CPU.
void check_act(const OpCtx& c, const char* op) {
    LOOM_ASSERT(c.act == DType::f32, "{} on the CPU with {} activations: the CPU keeps them f32",
                op, dtype_name(c.act));
}

float* F(void* p) {
    return static_cast<float*>(p);
}
const float* F(const void* p) {
    return static_cast<const float*>(p);
}

void matmul_fwd(const OpCtx& c, DType operands, void* y, const void* x, const void* w,
                const void* b, int64_t N, int64_t C, int64_t OC, WeightLayout layout,
                const GemmRounded& r) {
    check_act(c, "matmul_forward");
    if (operands == DType::bf16) {
        if (r.x16 != nullptr)
            matmul_forward_bf16_rounded(F(y), r.x16, F(w), F(b), N, C, OC, layout, r.w16);
        else
            matmul_forward_bf16(F(y), F(x), F(w), F(b), N, C, OC, layout, r.w16, r.keep_x16);
        return;
    }
    LOOM_ASSERT(r.w16 == nullptr && r.keep_x16 == nullptr && r.x16 == nullptr,
                "bf16 roundings given to a {} GEMM", dtype_name(operands));
    if (operands == DType::f16) {
        matmul_forward_fp16(F(y), F(x), F(w), F(b), N, C, OC, layout);
        return;
    }
    LOOM_ASSERT(operands == DType::f32, "a GEMM with {} operands", dtype_name(operands));
    matmul_forward(F(y), F(x), F(w), F(b), N, C, OC, layout);
}

void matmul_bwd(const OpCtx& c, DType operands, void* dx, void* dw, void* db, const void* dy,
                const void* x, const void* w, int64_t N, int64_t C, int64_t OC, WeightLayout layout,
                bool accumulate_dx, const GemmRounded& r) {
    check_act(c, "matmul_backward");
    if (operands == DType::bf16)
        matmul_backward_bf16(F(dx), F(dw), F(db), F(dy), F(x), F(w), N, C, OC, layout,
                             accumulate_dx, r.w16, r.x16);
    else if (operands == DType::f16)
        matmul_backward_fp16(F(dx), F(dw), F(db), F(dy), F(x), F(w), N, C, OC, layout,
                             accumulate_dx);
    else
        matmul_backward(F(dx), F(dw), F(db), F(dy), F(x), F(w), N, C, OC, layout, accumulate_dx);
}

void layer_norm_fwd(const OpCtx& c, void* y, float* mean, float* rstd, const void* x, const void* w,
                    const void* b, int64_t N, int64_t C, double eps) {
    check_act(c, "layer_norm_forward");
    layer_norm_forward(F(y), mean, rstd, F(x), F(w), F(b), N, C, eps);
}

void layer_norm_bwd(const OpCtx& c, void* dx, void* dw, void* db, const void* dy, const void* x,
                    const void* w, const float* mean, const float* rstd, int64_t N, int64_t C,
                    bool accumulate_dx) {
    check_act(c, "layer_norm_backward");
    layer_norm_backward(F(dx), F(dw), F(db), F(dy), F(x), F(w), mean, rstd, N, C, accumulate_dx);
}

void activation_fwd(const OpCtx& c, void* y, DType y_type, const void* x, int64_t n, Activation a) {
    check_act(c, "activation_forward");
    if (y_type == DType::bf16) {
        activation_forward_bf16(static_cast<uint16_t*>(y), F(x), n, a);
        return;
    }
    LOOM_ASSERT(y_type == DType::f32, "activation_forward to {} on the CPU", dtype_name(y_type));
    activation_forward(F(y), F(x), n, a);
}

void activation_bwd(const OpCtx& c, void* dx, const void* x, const void* dy, int64_t n,
                    Activation a) {
    check_act(c, "activation_backward");
    activation_backward(F(dx), F(x), F(dy), n, a);
}

void dropout_fwd(const OpCtx& c, void* y, const void* x, int64_t B, int64_t per_sample,
                 const DropoutSpec& d) {
    check_act(c, "dropout_forward");
    dropout_forward(F(y), F(x), B, per_sample, d);
}

void dropout_bwd(const OpCtx& c, void* dx, const void* dy, int64_t B, int64_t per_sample,
                 const DropoutSpec& d) {
    check_act(c, "dropout_backward");
    dropout_backward(F(dx), F(dy), B, per_sample, d);
}

void dropout_rows_cpu(const OpCtx& c, void* y, const void* x, const int64_t* rows, int64_t M,
                      int64_t seq_len, int64_t width, const DropoutSpec& d) {
    check_act(c, "dropout_rows");
    dropout_rows(F(y), F(x), rows, M, seq_len, width, d);
}

void residual_fwd(const OpCtx& c, void* y, const void* a, const void* b, int64_t n) {
    check_act(c, "residual_forward");
    residual_forward(F(y), F(a), F(b), n);
}

// Also over narrow buffers by value (widened, added, rounded): ZeRO-2 sums
// gradient shards with it, which a staged test backend keeps in bf16 or f16.
void add_inplace_cpu(const OpCtx& c, void* y, const void* x, int64_t n) {
    if (c.act == DType::bf16 || c.act == DType::f16) {
        const bool bf = c.act == DType::bf16;
        uint16_t* yy = static_cast<uint16_t*>(y);
        const uint16_t* xx = static_cast<const uint16_t*>(x);
        for (int64_t i = 0; i < n; ++i) {
            const float a = bf ? bf16_to_f32(yy[i]) : f16_to_f32(yy[i]);
            const float b = bf ? bf16_to_f32(xx[i]) : f16_to_f32(xx[i]);
            yy[i] = bf ? f32_to_bf16(a + b) : f32_to_f16(a + b);
        }
        return;
    }
    check_act(c, "add_inplace");
    add_inplace(F(y), F(x), n);
}

void add_bias_cpu(const OpCtx& c, void* y, const void* b, int64_t N, int64_t OC) {
    check_act(c, "add_bias");
    for (int64_t r = 0; r < N; ++r) add_inplace(F(y) + r * OC, F(b), OC);
}

void embedding_fwd(const OpCtx& c, void* y, const int64_t* ids, const void* table, int64_t N,
                   int64_t V, int64_t C, bool accumulate) {
    check_act(c, "embedding_forward");
    embedding_forward(F(y), ids, F(table), N, V, C, accumulate);
}

void embedding_bwd(const OpCtx& c, void* dtable, const int64_t* ids, const void* dy, int64_t N,
                   int64_t V, int64_t C, int64_t padding_idx) {
    check_act(c, "embedding_backward");
    embedding_backward(F(dtable), ids, F(dy), N, V, C, padding_idx);
}

void attention_fwd(const OpCtx& c, DType operands, void* y, void* att, const void* q, const void* k,
                   const void* v, int64_t ld, const AttnShape& s, const AttnMask& m,
                   const DropoutSpec& d) {
    check_act(c, "attention_forward");
    auto* const kernel =
        operands == DType::bf16 ? attention_forward_bf16 : attention_forward<float>;
    kernel(F(y), F(att), F(q), F(k), F(v), ld, s, m, d);
}

void attention_bwd(const OpCtx& c, DType operands, void* dq, void* dk, void* dv, void* scratch,
                   const void* dy, const void* att, const void* q, const void* k, const void* v,
                   int64_t ld, const AttnShape& s, const AttnMask& m, const DropoutSpec& d) {
    check_act(c, "attention_backward");
    auto* const kernel =
        operands == DType::bf16 ? attention_backward_bf16 : attention_backward<float>;
    kernel(F(dq), F(dk), F(dv), F(scratch), F(dy), F(att), F(q), F(k), F(v), ld, s, m, d);
}

void attention_rows_fwd(const OpCtx& c, void* y, void* att, const void* q, const void* k,
                        const void* v, int64_t ld, const AttnShape& s, const AttnMask& m,
                        const DropoutSpec& d, const AttnRows& rows) {
    check_act(c, "attention_rows_forward");
    attention_rows_forward(F(y), F(att), F(q), F(k), F(v), ld, s, m, d, rows);
}

void attention_rows_bwd(const OpCtx& c, void* dq, void* dk, void* dv, void* scratch, const void* dy,
                        const void* att, const void* q, const void* k, const void* v, int64_t ld,
                        const AttnShape& s, const AttnMask& m, const DropoutSpec& d,
                        const AttnRows& rows) {
    check_act(c, "attention_rows_backward");
    attention_rows_backward(F(dq), F(dk), F(dv), F(scratch), F(dy), F(att), F(q), F(k), F(v), ld, s,
                            m, d, rows);
}

XentSum xent_fwd(const OpCtx& c, void* losses, const void* logits, const int64_t* targets,
                 int64_t N, int64_t V) {
    check_act(c, "softmax_xent_forward");
    return softmax_xent_forward<float>(F(losses), F(logits), targets, N, V);
}

void xent_bwd(const OpCtx& c, void* dlogits, const void* logits, const int64_t* targets, int64_t N,
              int64_t V, double scale) {
    check_act(c, "softmax_xent_backward");
    softmax_xent_backward<float>(F(dlogits), F(logits), targets, N, V, scale);
}

void vocab_embedding_fwd(const OpCtx& c, void* y, const int64_t* ids, const void* table, int64_t N,
                         int64_t V, int64_t C, int64_t first, int64_t count) {
    check_act(c, "vocab_embedding_forward");
    vocab_lookup_local(F(y), ids, F(table), N, V, C, first, count);
}

void vocab_embedding_bwd(const OpCtx& c, void* dtable, const int64_t* ids, const void* dy,
                         int64_t N, int64_t V, int64_t C, int64_t first, int64_t count,
                         int64_t padding_idx, int64_t*) {
    check_act(c, "vocab_embedding_backward");
    vocab_embedding_backward_local(F(dtable), ids, F(dy), N, V, C, first, count, padding_idx);
}

void vocab_xent_max_fn(const OpCtx& c, float* row_max, const void* logits, int64_t N, int64_t Vl,
                       int64_t valid) {
    check_act(c, "vocab_xent_max");
    vocab_xent_local_max(row_max, F(logits), N, Vl, valid);
}

void vocab_xent_stats_fn(const OpCtx& c, float* stats, const void* logits, const int64_t* targets,
                         const float* row_max, int64_t N, int64_t Vl, int64_t valid, int64_t first,
                         int64_t V) {
    check_act(c, "vocab_xent_stats");
    vocab_xent_local_stats(stats, F(logits), targets, row_max, N, Vl, valid, first, V);
}

XentSum vocab_xent_loss_fn(const OpCtx&, const float* row_max, const float* stats,
                           const int64_t* targets, int64_t N, int64_t) {
    return vocab_xent_loss_sum<float>(nullptr, row_max, stats, targets, N);
}

void vocab_xent_bwd(const OpCtx& c, void* dlogits, const void* logits, const int64_t* targets,
                    const float* row_max, const float* stats, int64_t N, int64_t Vl, int64_t valid,
                    int64_t first, int64_t V, double scale) {
    check_act(c, "vocab_xent_backward");
    vocab_xent_backward_local(F(dlogits), F(logits), targets, row_max, stats, N, Vl, valid, first,
                              V, scale);
}

void rms_norm_fwd(const OpCtx& c, void* y, float* rstd, const void* x, const void* w, int64_t N,
                  int64_t C, double eps) {
    check_act(c, "rms_norm_forward");
    rms_norm_forward(F(y), rstd, F(x), F(w), N, C, eps);
}

void rms_norm_bwd(const OpCtx& c, void* dx, void* dw, const void* dy, const void* x, const void* w,
                  const float* rstd, int64_t N, int64_t C, bool accumulate_dx) {
    check_act(c, "rms_norm_backward");
    rms_norm_backward(F(dx), F(dw), F(dy), F(x), F(w), rstd, N, C, accumulate_dx);
}

void rope_cpu(const OpCtx& c, void* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t d,
              const RopeSpec& spec, bool inverse, const int64_t* positions) {
    check_act(c, "rope");
    rope_apply(F(x), ld, B, T, heads, d, spec, inverse, positions);
}

void repeat_kv_fwd(const OpCtx& c, void* expanded, const void* packed, int64_t N, int64_t NH,
                   int64_t NKV, int64_t d) {
    check_act(c, "repeat_kv_forward");
    repeat_kv_forward(F(expanded), F(packed), N, NH, NKV, d);
}

void repeat_kv_bwd(const OpCtx& c, void* dpacked, const void* dexpanded, int64_t N, int64_t NH,
                   int64_t NKV, int64_t d) {
    check_act(c, "repeat_kv_backward");
    repeat_kv_backward(F(dpacked), F(dexpanded), N, NH, NKV, d);
}

void swiglu_fwd(const OpCtx& c, void* y, DType y_type, const void* gu, int64_t N, int64_t I) {
    check_act(c, "swiglu_forward");
    if (y_type == DType::bf16) {
        swiglu_forward_bf16(static_cast<uint16_t*>(y), F(gu), N, I);
        return;
    }
    LOOM_ASSERT(y_type == DType::f32, "swiglu_forward to {} on the CPU", dtype_name(y_type));
    swiglu_forward(F(y), F(gu), N, I);
}

void swiglu_bwd(const OpCtx& c, void* dgu, const void* gu, const void* dy, int64_t N, int64_t I) {
    check_act(c, "swiglu_backward");
    swiglu_backward(F(dgu), F(gu), F(dy), N, I);
}

}  // namespace

extern constinit const NnOps k_cpu_nn_ops;
constinit const NnOps k_cpu_nn_ops{
    .matmul_forward = matmul_fwd,
    .matmul_backward = matmul_bwd,
    .layer_norm_forward = layer_norm_fwd,
    .layer_norm_backward = layer_norm_bwd,
    .activation_forward = activation_fwd,
    .activation_backward = activation_bwd,
    .dropout_forward = dropout_fwd,
    .dropout_backward = dropout_bwd,
    .dropout_rows = dropout_rows_cpu,
    .residual_forward = residual_fwd,
    .add_inplace = add_inplace_cpu,
    .add_bias = add_bias_cpu,
    .embedding_forward = embedding_fwd,
    .embedding_backward = embedding_bwd,
    .attention_forward = attention_fwd,
    .attention_backward = attention_bwd,
    .attention_rows_forward = attention_rows_fwd,
    .attention_rows_backward = attention_rows_bwd,
    .softmax_xent_forward = xent_fwd,
    .softmax_xent_backward = xent_bwd,
    .vocab_embedding_forward = vocab_embedding_fwd,
    .vocab_embedding_backward = vocab_embedding_bwd,
    .vocab_xent_max = vocab_xent_max_fn,
    .vocab_xent_stats = vocab_xent_stats_fn,
    .vocab_xent_loss = vocab_xent_loss_fn,
    .vocab_xent_backward = vocab_xent_bwd,
    .rms_norm_forward = rms_norm_fwd,
    .rms_norm_backward = rms_norm_bwd,
    .rope = rope_cpu,
    .repeat_kv_forward = repeat_kv_fwd,
    .repeat_kv_backward = repeat_kv_bwd,
    .swiglu_forward = swiglu_fwd,
    .swiglu_backward = swiglu_bwd,
    .attention_window = true,
};

}  // namespace loom
