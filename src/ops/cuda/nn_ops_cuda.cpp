// The CUDA NnOps (ops/nn_ops.h): each entry dispatches on the activation
// type (f32, bf16, f16) to the templated kernel of ops/cuda/. Activations,
// the parameters' compute copy and gradients all share that type, so a GEMM's
// and attention's operands are the activations themselves: `operands` must
// equal OpCtx::act. The row-subset entries (dropout_rows, attention_rows_*)
// have no kernels here and are null, so a block computes every row. The
// vocab-parallel entries are tp_vocab_cuda.h's kernels; the loss entry
// synchronises, as softmax_xent_forward does. The Llama family's entries are
// llama_cuda.h's; attention takes no sliding window here (attention_window
// false), so Mistral with a window stays on the CPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <utility>

#include "backend/cuda/cuda_check.h"
#include "core/check.h"
#include "ops/cuda/activation_cuda.h"
#include "ops/cuda/attention_cuda.h"
#include "ops/cuda/dropout_cuda.h"
#include "ops/cuda/elementwise_cuda.h"
#include "ops/cuda/embedding_cuda.h"
#include "ops/cuda/flash_attention_cuda.h"
#include "ops/cuda/float_dispatch.h"
#include "ops/cuda/layer_norm_cuda.h"
#include "ops/cuda/llama_cuda.h"
#include "ops/cuda/matmul_cuda.h"
#include "ops/cuda/softmax_xent_cuda.h"
#include "ops/cuda/tp_vocab_cuda.h"
#include "ops/device_ops.h"

namespace loom {

namespace {

CudaContext& context(const OpCtx& c) {
    CudaContext* ctx = c.be->cuda();
    LOOM_ASSERT(ctx != nullptr, "a CUDA kernel called with the {} backend", c.be->name());
    return *ctx;
}

// Calls f(T{}) with T the activation type.
template <typename F>
auto with_act(const OpCtx& c, const char* op, F&& f) {
    return with_float_type(c.act, op, std::forward<F>(f));
}

void check_operands(const OpCtx& c, DType operands, const char* op) {
    LOOM_ASSERT(operands == c.act,
                "{} on CUDA with {} operands and {} activations: CUDA keeps activations in the "
                "compute type",
                op, dtype_name(operands), dtype_name(c.act));
}

template <typename T>
T* P(void* p) {
    return static_cast<T*>(p);
}
template <typename T>
const T* P(const void* p) {
    return static_cast<const T*>(p);
}

void matmul_fwd(const OpCtx& c, DType operands, void* y, const void* x, const void* w,
                const void* b, int64_t N, int64_t C, int64_t OC, WeightLayout layout,
                const GemmRounded& r) {
    check_operands(c, operands, "matmul_forward");
    LOOM_ASSERT(r.w16 == nullptr && r.keep_x16 == nullptr && r.x16 == nullptr,
                "rounded GEMM operands given on CUDA");
    with_act(c, "matmul_forward", [&](auto t) {
        using T = decltype(t);
        matmul_forward_cuda<T>(P<T>(y), P<T>(x), P<T>(w), P<T>(b), N, C, OC, layout, context(c));
    });
}

void matmul_bwd(const OpCtx& c, DType operands, void* dx, void* dw, void* db, const void* dy,
                const void* x, const void* w, int64_t N, int64_t C, int64_t OC, WeightLayout layout,
                bool accumulate_dx, const GemmRounded& r) {
    check_operands(c, operands, "matmul_backward");
    LOOM_ASSERT(r.x16 == nullptr, "rounded GEMM operands given on CUDA");
    with_act(c, "matmul_backward", [&](auto t) {
        using T = decltype(t);
        matmul_backward_cuda<T>(P<T>(dx), P<T>(dw), P<T>(db), P<T>(dy), P<T>(x), P<T>(w), N, C, OC,
                                layout, accumulate_dx, context(c));
    });
}

void layer_norm_fwd(const OpCtx& c, void* y, float* mean, float* rstd, const void* x, const void* w,
                    const void* b, int64_t N, int64_t C, double eps) {
    with_act(c, "layer_norm_forward", [&](auto t) {
        using T = decltype(t);
        layer_norm_forward_cuda<T>(P<T>(y), mean, rstd, P<T>(x), P<T>(w), P<T>(b), N, C, eps,
                                   context(c));
    });
}

void layer_norm_bwd(const OpCtx& c, void* dx, void* dw, void* db, const void* dy, const void* x,
                    const void* w, const float* mean, const float* rstd, int64_t N, int64_t C,
                    bool accumulate_dx) {
    // A frozen LayerNorm (LoRA's base) skips the parameter kernel, which sums
    // both gradients together: a frozen weight with a trained bias it cannot do.
    LOOM_ASSERT(dw != nullptr || db == nullptr,
                "a LayerNorm on CUDA with a frozen weight and a trained bias");
    with_act(c, "layer_norm_backward", [&](auto t) {
        using T = decltype(t);
        layer_norm_backward_cuda<T>(P<T>(dx), P<T>(dw), P<T>(db), P<T>(dy), P<T>(x), P<T>(w), mean,
                                    rstd, N, C, accumulate_dx, context(c));
    });
}

void activation_fwd(const OpCtx& c, void* y, DType y_type, const void* x, int64_t n, Activation a) {
    LOOM_ASSERT(y_type == c.act, "activation_forward to {} from {} activations on CUDA",
                dtype_name(y_type), dtype_name(c.act));
    with_act(c, "activation_forward", [&](auto t) {
        using T = decltype(t);
        activation_forward_cuda<T>(P<T>(y), P<T>(x), n, a, context(c));
    });
}

void activation_bwd(const OpCtx& c, void* dx, const void* x, const void* dy, int64_t n,
                    Activation a) {
    with_act(c, "activation_backward", [&](auto t) {
        using T = decltype(t);
        activation_backward_cuda<T>(P<T>(dx), P<T>(x), P<T>(dy), n, a, context(c));
    });
}

void dropout_fwd(const OpCtx& c, void* y, const void* x, int64_t B, int64_t per_sample,
                 const DropoutSpec& d) {
    with_act(c, "dropout_forward", [&](auto t) {
        using T = decltype(t);
        dropout_forward_cuda<T>(P<T>(y), P<T>(x), B, per_sample, d, context(c));
    });
}

void dropout_bwd(const OpCtx& c, void* dx, const void* dy, int64_t B, int64_t per_sample,
                 const DropoutSpec& d) {
    with_act(c, "dropout_backward", [&](auto t) {
        using T = decltype(t);
        dropout_backward_cuda<T>(P<T>(dx), P<T>(dy), B, per_sample, d, context(c));
    });
}

void residual_fwd(const OpCtx& c, void* y, const void* a, const void* b, int64_t n) {
    with_act(c, "residual_forward", [&](auto t) {
        using T = decltype(t);
        residual_forward_cuda<T>(P<T>(y), P<T>(a), P<T>(b), n, context(c));
    });
}

void add_inplace_fn(const OpCtx& c, void* y, const void* x, int64_t n) {
    with_act(c, "add_inplace", [&](auto t) {
        using T = decltype(t);
        add_inplace_cuda<T>(P<T>(y), P<T>(x), n, context(c));
    });
}

void add_bias_fn(const OpCtx& c, void* y, const void* b, int64_t N, int64_t OC) {
    with_act(c, "add_bias", [&](auto t) {
        using T = decltype(t);
        add_bias_cuda<T>(P<T>(y), P<T>(b), N, OC, context(c));
    });
}

void embedding_fwd(const OpCtx& c, void* y, const int64_t* ids, const void* table, int64_t N,
                   int64_t V, int64_t C, bool accumulate) {
    with_act(c, "embedding_forward", [&](auto t) {
        using T = decltype(t);
        embedding_forward_cuda<T>(P<T>(y), ids, P<T>(table), N, V, C, accumulate, context(c));
    });
}

void embedding_bwd(const OpCtx& c, void* dtable, const int64_t* ids, const void* dy, int64_t N,
                   int64_t V, int64_t C, int64_t padding_idx) {
    with_act(c, "embedding_backward", [&](auto t) {
        using T = decltype(t);
        embedding_backward_cuda<T>(P<T>(dtable), ids, P<T>(dy), N, V, C, padding_idx, context(c));
    });
}

// Mistral's sliding window has no CUDA kernel yet; the Llama family refuses
// this table before any attention runs (NnOps::decoder_supported).
void check_no_window(const AttnMask& m, const char* op) {
    LOOM_CHECK(m.window < 0, "{}: the CUDA attention kernels take no sliding window", op);
}

void attention_fwd(const OpCtx& c, DType operands, void* y, void* att, const void* q, const void* k,
                   const void* v, int64_t ld, const AttnShape& s, const AttnMask& m,
                   const DropoutSpec& d) {
    check_operands(c, operands, "attention_forward");
    check_no_window(m, "attention_forward");
    with_act(c, "attention_forward", [&](auto t) {
        using T = decltype(t);
        attention_forward_cuda<T>(P<T>(y), P<T>(att), P<T>(q), P<T>(k), P<T>(v), ld, s, m, d,
                                  context(c));
    });
}

void attention_bwd(const OpCtx& c, DType operands, void* dq, void* dk, void* dv, void* scratch,
                   const void* dy, const void* att, const void* q, const void* k, const void* v,
                   int64_t ld, const AttnShape& s, const AttnMask& m, const DropoutSpec& d) {
    check_operands(c, operands, "attention_backward");
    check_no_window(m, "attention_backward");
    with_act(c, "attention_backward", [&](auto t) {
        using T = decltype(t);
        attention_backward_cuda<T>(P<T>(dq), P<T>(dk), P<T>(dv), P<T>(scratch), P<T>(dy), P<T>(att),
                                   P<T>(q), P<T>(k), P<T>(v), ld, s, m, d, context(c));
    });
}

void fused_attention_fwd(const OpCtx& c, DType operands, void* y, float* lse, const void* q,
                         const void* k, const void* v, int64_t ld, const AttnShape& s,
                         const AttnMask& m, const DropoutSpec& d) {
    check_operands(c, operands, "fused_attention_forward");
    check_no_window(m, "fused_attention_forward");
    with_act(c, "fused_attention_forward", [&](auto t) {
        using T = decltype(t);
        flash_attention_forward_cuda<T>(P<T>(y), lse, P<T>(q), P<T>(k), P<T>(v), ld, s, m, d,
                                        context(c));
    });
}

void fused_attention_bwd(const OpCtx& c, DType operands, void* dq, void* dk, void* dv,
                         const void* dy, const void* y, const float* lse, const void* q,
                         const void* k, const void* v, int64_t ld, const AttnShape& s,
                         const AttnMask& m, const DropoutSpec& d) {
    check_operands(c, operands, "fused_attention_backward");
    check_no_window(m, "fused_attention_backward");
    with_act(c, "fused_attention_backward", [&](auto t) {
        using T = decltype(t);
        flash_attention_backward_cuda<T>(P<T>(dq), P<T>(dk), P<T>(dv), P<T>(dy), P<T>(y), lse,
                                         P<T>(q), P<T>(k), P<T>(v), ld, s, m, d, context(c));
    });
}

void rms_norm_fwd(const OpCtx& c, void* y, float* rstd, const void* x, const void* w, int64_t N,
                  int64_t C, double eps) {
    with_act(c, "rms_norm_forward", [&](auto t) {
        using T = decltype(t);
        rms_norm_forward_cuda<T>(P<T>(y), rstd, P<T>(x), P<T>(w), N, C, eps, context(c));
    });
}

void rms_norm_bwd(const OpCtx& c, void* dx, void* dw, const void* dy, const void* x, const void* w,
                  const float* rstd, int64_t N, int64_t C, bool accumulate_dx) {
    with_act(c, "rms_norm_backward", [&](auto t) {
        using T = decltype(t);
        rms_norm_backward_cuda<T>(P<T>(dx), P<T>(dw), P<T>(dy), P<T>(x), P<T>(w), rstd, N, C,
                                  accumulate_dx, context(c));
    });
}

void rope_fn(const OpCtx& c, void* x, int64_t ld, int64_t B, int64_t T_, int64_t heads, int64_t d,
             const RopeSpec& spec, bool inverse, const int64_t* positions) {
    with_act(c, "rope", [&](auto t) {
        using T = decltype(t);
        rope_cuda<T>(P<T>(x), ld, B, T_, heads, d, spec, inverse, context(c), positions);
    });
}

void repeat_kv_fwd(const OpCtx& c, void* expanded, const void* packed, int64_t N, int64_t NH,
                   int64_t NKV, int64_t d) {
    with_act(c, "repeat_kv_forward", [&](auto t) {
        using T = decltype(t);
        repeat_kv_forward_cuda<T>(P<T>(expanded), P<T>(packed), N, NH, NKV, d, context(c));
    });
}

void repeat_kv_bwd(const OpCtx& c, void* dpacked, const void* dexpanded, int64_t N, int64_t NH,
                   int64_t NKV, int64_t d) {
    with_act(c, "repeat_kv_backward", [&](auto t) {
        using T = decltype(t);
        repeat_kv_backward_cuda<T>(P<T>(dpacked), P<T>(dexpanded), N, NH, NKV, d, context(c));
    });
}

// CUDA keeps the post-activation in the activation type (no narrower GEMM input).
void swiglu_fwd(const OpCtx& c, void* y, DType y_type, const void* gu, int64_t N, int64_t I) {
    LOOM_ASSERT(y_type == c.act, "swiglu_forward to {} on CUDA with {} activations",
                dtype_name(y_type), dtype_name(c.act));
    with_act(c, "swiglu_forward", [&](auto t) {
        using T = decltype(t);
        swiglu_forward_cuda<T>(P<T>(y), P<T>(gu), N, I, context(c));
    });
}

void swiglu_bwd(const OpCtx& c, void* dgu, const void* gu, const void* dy, int64_t N, int64_t I) {
    with_act(c, "swiglu_backward", [&](auto t) {
        using T = decltype(t);
        swiglu_backward_cuda<T>(P<T>(dgu), P<T>(gu), P<T>(dy), N, I, context(c));
    });
}

XentSum xent_fwd(const OpCtx& c, void* losses, const void* logits, const int64_t* targets,
                 int64_t N, int64_t V) {
    return with_act(c, "softmax_xent_forward", [&](auto t) {
        using T = decltype(t);
        return softmax_xent_forward_cuda<T>(P<T>(losses), P<T>(logits), targets, N, V, context(c));
    });
}

void xent_bwd(const OpCtx& c, void* dlogits, const void* logits, const int64_t* targets, int64_t N,
              int64_t V, double scale) {
    with_act(c, "softmax_xent_backward", [&](auto t) {
        using T = decltype(t);
        softmax_xent_backward_cuda<T>(P<T>(dlogits), P<T>(logits), targets, N, V, scale,
                                      context(c));
    });
}

// The vocab-parallel pieces (tp_vocab_cuda.h).
void vocab_embedding_fwd(const OpCtx& c, void* y, const int64_t* ids, const void* table, int64_t N,
                         int64_t V, int64_t C, int64_t first, int64_t count) {
    with_act(c, "vocab_embedding_forward", [&](auto t) {
        using T = decltype(t);
        vocab_parallel_lookup_cuda<T>(P<T>(y), ids, P<T>(table), N, V, C, first, count, context(c));
    });
}

// Ids this rank does not own (and padding_idx) map to an extra row that the
// deterministic embedding backward skips as padding.
void vocab_embedding_bwd(const OpCtx& c, void* dtable, const int64_t* ids, const void* dy,
                         int64_t N, int64_t, int64_t C, int64_t first, int64_t count,
                         int64_t padding_idx, int64_t* ids_work) {
    LOOM_ASSERT(ids_work != nullptr || N == 0, "vocab_embedding_backward on CUDA without ids_work");
    with_act(c, "vocab_embedding_backward", [&](auto t) {
        using T = decltype(t);
        vocab_parallel_backward_ids_cuda(ids_work, ids, N, first, count, padding_idx, context(c));
        embedding_backward_cuda<T>(P<T>(dtable), ids_work, P<T>(dy), N, count + 1, C, count,
                                   context(c));
    });
}

void vocab_xent_max_fn(const OpCtx& c, float* row_max, const void* logits, int64_t N, int64_t Vl,
                       int64_t valid) {
    with_act(c, "vocab_xent_max", [&](auto t) {
        using T = decltype(t);
        vocab_xent_local_max_cuda<T>(row_max, P<T>(logits), N, Vl, valid, context(c));
    });
}

void vocab_xent_stats_fn(const OpCtx& c, float* stats, const void* logits, const int64_t* targets,
                         const float* row_max, int64_t N, int64_t Vl, int64_t valid, int64_t first,
                         int64_t V) {
    with_act(c, "vocab_xent_stats", [&](auto t) {
        using T = decltype(t);
        vocab_xent_local_stats_cuda<T>(stats, P<T>(logits), targets, row_max, N, Vl, valid, first,
                                       V, context(c));
    });
}

XentSum vocab_xent_loss_fn(const OpCtx& c, const float* row_max, const float* stats,
                           const int64_t* targets, int64_t N, int64_t V) {
    CudaContext& ctx = context(c);
    auto* result = static_cast<XentSum*>(ctx.scratch(sizeof(XentSum)));
    vocab_xent_loss_sum_cuda(result, row_max, stats, targets, N, V, ctx);
    XentSum out{};
    LOOM_CUDA_CHECK(
        cudaMemcpyAsync(&out, result, sizeof out, cudaMemcpyDeviceToHost, ctx.stream()));
    ctx.check_device_errors();  // synchronises
    return out;
}

void vocab_xent_bwd(const OpCtx& c, void* dlogits, const void* logits, const int64_t* targets,
                    const float* row_max, const float* stats, int64_t N, int64_t Vl, int64_t valid,
                    int64_t first, int64_t V, double scale) {
    with_act(c, "vocab_xent_backward", [&](auto t) {
        using T = decltype(t);
        vocab_xent_backward_cuda<T>(P<T>(dlogits), P<T>(logits), targets, row_max, stats, N, Vl,
                                    valid, first, V, scale, context(c));
    });
}

}  // namespace

extern constinit const NnOps k_cuda_nn_ops;
constinit const NnOps k_cuda_nn_ops{
    .matmul_forward = matmul_fwd,
    .matmul_backward = matmul_bwd,
    .layer_norm_forward = layer_norm_fwd,
    .layer_norm_backward = layer_norm_bwd,
    .activation_forward = activation_fwd,
    .activation_backward = activation_bwd,
    .dropout_forward = dropout_fwd,
    .dropout_backward = dropout_bwd,
    .dropout_rows = nullptr,
    .residual_forward = residual_fwd,
    .add_inplace = add_inplace_fn,
    .add_bias = add_bias_fn,
    .embedding_forward = embedding_fwd,
    .embedding_backward = embedding_bwd,
    .attention_forward = attention_fwd,
    .attention_backward = attention_bwd,
    .fused_attention_supported = flash_attention_supported,
    .fused_attention_forward = fused_attention_fwd,
    .fused_attention_backward = fused_attention_bwd,
    .attention_rows_forward = nullptr,
    .attention_rows_backward = nullptr,
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
    .rope = rope_fn,
    .repeat_kv_forward = repeat_kv_fwd,
    .repeat_kv_backward = repeat_kv_bwd,
    .swiglu_forward = swiglu_fwd,
    .swiglu_backward = swiglu_bwd,
};

}  // namespace loom
