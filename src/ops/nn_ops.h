// NnOps: the nn modules' kernels in a device's table (DeviceOps::nn,
// ops/device_ops.h), the contract the one model stack is written against.
//
// An entry takes an OpCtx: the backend whose memory every pointer is in,
// and `act`, the storage type of the op's activations, of the parameters it
// reads (the compute copy) and of the gradients it writes. The CPU keeps all
// three in f32 and rounds a GEMM's operands to the module's compute type as
// it reads them; CUDA keeps them in the compute type. LayerNorm statistics
// are f32 and token ids i64 everywhere.
//
// Every entry means what the CPU op of the same name in ops/<op>.h means,
// including its accumulation rule (parameter gradients +=, an activation
// gradient overwritten unless `accumulate_dx`); tests/ops/test_nn_ops.cpp
// checks the CPU table against those ops and tests/cuda/test_cuda_nn_ops.cpp
// every CUDA entry against the CPU one. An entry a device lacks is null;
// the caller asks (e.g. `rows_supported`) before it calls.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/dtype.h"
#include "ops/activation.h"
#include "ops/attention_rows.h"
#include "ops/dropout.h"
#include "ops/matmul.h"
#include "ops/rope.h"
#include "ops/softmax_xent.h"

namespace loom {

struct DeviceOps;
struct NnOps;

struct OpCtx {
    Backend* be = nullptr;
    DType act = DType::f32;
    const DeviceOps& ops() const { return be->ops(); }
    inline const NnOps& nn() const;  // ops/device_ops.h
};

// Roundings of a GEMM's operands a caller keeps, for operands narrower than
// `act` (the CPU's bf16 compute): the weight as rounded for this step, the
// input's rounding written by forward for backward to reuse, or the input
// given only rounded (x then null). All null: rounded per call. A device
// whose activations are already in the operand type takes none.
struct GemmRounded {
    const uint16_t* w16 = nullptr;
    uint16_t* keep_x16 = nullptr;
    const uint16_t* x16 = nullptr;
};

struct NnOps {
    // y (N, OC) = x (N, C) @ W^T + b, W (OC, C) or (C, OC) per layout; b may be null.
    void (*matmul_forward)(const OpCtx&, DType operands, void* y, const void* x, const void* w,
                           const void* b, int64_t N, int64_t C, int64_t OC, WeightLayout,
                           const GemmRounded&) = nullptr;
    // dw, db +=; dx (may be null) overwritten unless accumulate_dx.
    void (*matmul_backward)(const OpCtx&, DType operands, void* dx, void* dw, void* db,
                            const void* dy, const void* x, const void* w, int64_t N, int64_t C,
                            int64_t OC, WeightLayout, bool accumulate_dx,
                            const GemmRounded&) = nullptr;
    void (*layer_norm_forward)(const OpCtx&, void* y, float* mean, float* rstd, const void* x,
                               const void* w, const void* b, int64_t N, int64_t C,
                               double eps) = nullptr;
    void (*layer_norm_backward)(const OpCtx&, void* dx, void* dw, void* db, const void* dy,
                                const void* x, const void* w, const float* mean, const float* rstd,
                                int64_t N, int64_t C, bool accumulate_dx) = nullptr;
    // y in `y_type`: act, or a GEMM operand type narrower than act (a
    // post-activation only a GEMM reads, stored as that GEMM rounds it).
    void (*activation_forward)(const OpCtx&, void* y, DType y_type, const void* x, int64_t n,
                               Activation) = nullptr;
    // x is the forward's input; dx may alias dy.
    void (*activation_backward)(const OpCtx&, void* dx, const void* x, const void* dy, int64_t n,
                                Activation) = nullptr;
    // Masks keyed by global sample (DropoutSpec); y may alias x.
    void (*dropout_forward)(const OpCtx&, void* y, const void* x, int64_t B, int64_t per_sample,
                            const DropoutSpec&) = nullptr;
    void (*dropout_backward)(const OpCtx&, void* dx, const void* dy, int64_t B, int64_t per_sample,
                             const DropoutSpec&) = nullptr;
    // M packed rows of `width`, row i at position rows[i] of a (B * seq_len) batch.
    void (*dropout_rows)(const OpCtx&, void* y, const void* x, const int64_t* rows, int64_t M,
                         int64_t seq_len, int64_t width, const DropoutSpec&) = nullptr;
    void (*residual_forward)(const OpCtx&, void* y, const void* a, const void* b,
                             int64_t n) = nullptr;
    void (*add_inplace)(const OpCtx&, void* y, const void* x, int64_t n) = nullptr;
    // y (N, OC) += b (OC) on every row.
    void (*add_bias)(const OpCtx&, void* y, const void* b, int64_t N, int64_t OC) = nullptr;
    void (*embedding_forward)(const OpCtx&, void* y, const int64_t* ids, const void* table,
                              int64_t N, int64_t V, int64_t C, bool accumulate) = nullptr;
    void (*embedding_backward)(const OpCtx&, void* dtable, const int64_t* ids, const void* dy,
                               int64_t N, int64_t V, int64_t C, int64_t padding_idx) = nullptr;
    // q, k, v rows of stride ld; att (B, NH, T, T) the probabilities before
    // dropout. `operands`: the compute type; a device that cannot emulate it
    // in attention's own GEMMs says so in its table's file.
    void (*attention_forward)(const OpCtx&, DType operands, void* y, void* att, const void* q,
                              const void* k, const void* v, int64_t ld, const AttnShape&,
                              const AttnMask&, const DropoutSpec&) = nullptr;
    void (*attention_backward)(const OpCtx&, DType operands, void* dq, void* dk, void* dv,
                               void* scratch, const void* dy, const void* att, const void* q,
                               const void* k, const void* v, int64_t ld, const AttnShape&,
                               const AttnMask&, const DropoutSpec&) = nullptr;
    // Fused attention (FlashAttention-2's scheme; null where the device has
    // none): saves lse (B, NH, T) f32, the log-sum-exp of each row's scaled
    // scores, instead of the probabilities, and backward recomputes them from
    // it and y, the forward's output. Same semantics as the entries above for
    // the shapes fused_attention_supported accepts, when every query row sees
    // a key (attention_every_row_has_a_key); other batches take the unfused
    // entries. key_padding in the backend's memory.
    bool (*fused_attention_supported)(const AttnShape&) = nullptr;
    void (*fused_attention_forward)(const OpCtx&, DType operands, void* y, float* lse,
                                    const void* q, const void* k, const void* v, int64_t ld,
                                    const AttnShape&, const AttnMask&,
                                    const DropoutSpec&) = nullptr;
    void (*fused_attention_backward)(const OpCtx&, DType operands, void* dq, void* dk, void* dv,
                                     const void* dy, const void* y, const float* lse, const void* q,
                                     const void* k, const void* v, int64_t ld, const AttnShape&,
                                     const AttnMask&, const DropoutSpec&) = nullptr;
    // Attention at the query rows `rows` only (ops/attention_rows.h).
    void (*attention_rows_forward)(const OpCtx&, void* y, void* att, const void* q, const void* k,
                                   const void* v, int64_t ld, const AttnShape&, const AttnMask&,
                                   const DropoutSpec&, const AttnRows&) = nullptr;
    void (*attention_rows_backward)(const OpCtx&, void* dq, void* dk, void* dv, void* scratch,
                                    const void* dy, const void* att, const void* q, const void* k,
                                    const void* v, int64_t ld, const AttnShape&, const AttnMask&,
                                    const DropoutSpec&, const AttnRows&) = nullptr;
    // losses (N) may be null; the sums come back to the host.
    XentSum (*softmax_xent_forward)(const OpCtx&, void* losses, const void* logits,
                                    const int64_t* targets, int64_t N, int64_t V) = nullptr;
    void (*softmax_xent_backward)(const OpCtx&, void* dlogits, const void* logits,
                                  const int64_t* targets, int64_t N, int64_t V,
                                  double scale) = nullptr;

    // Vocab-parallel pieces (ops/vocab_parallel.h; the caller posts the
    // collectives between them): this rank's vocabulary slice is ids
    // [first, first + count), the first `valid` of them real. Row maxima and
    // stats are f32 in backend memory; ids and targets i64 there.
    // y (N, C) = table[id - first] where owned, 0 elsewhere (overwrites).
    void (*vocab_embedding_forward)(const OpCtx&, void* y, const int64_t* ids, const void* table,
                                    int64_t N, int64_t V, int64_t C, int64_t first,
                                    int64_t count) = nullptr;
    // dtable (count, C) += dy's owned rows but padding_idx's. ids_work: (N)
    // i64 of backend memory a device may remap the ids into.
    void (*vocab_embedding_backward)(const OpCtx&, void* dtable, const int64_t* ids, const void* dy,
                                     int64_t N, int64_t V, int64_t C, int64_t first, int64_t count,
                                     int64_t padding_idx, int64_t* ids_work) = nullptr;
    // row_max (N) over the valid columns of (N, Vl) logits.
    void (*vocab_xent_max)(const OpCtx&, float* row_max, const void* logits, int64_t N, int64_t Vl,
                           int64_t valid) = nullptr;
    // stats (2N) = [sums of exp(x - row_max) | the target's logit where owned, else 0].
    void (*vocab_xent_stats)(const OpCtx&, float* stats, const void* logits, const int64_t* targets,
                             const float* row_max, int64_t N, int64_t Vl, int64_t valid,
                             int64_t first, int64_t V) = nullptr;
    // From the reduced row_max and stats; the sums come back to the host.
    XentSum (*vocab_xent_loss)(const OpCtx&, const float* row_max, const float* stats,
                               const int64_t* targets, int64_t N, int64_t V) = nullptr;
    // dlogits (N, Vl) overwritten, from the reduced row_max and stats.
    void (*vocab_xent_backward)(const OpCtx&, void* dlogits, const void* logits,
                                const int64_t* targets, const float* row_max, const float* stats,
                                int64_t N, int64_t Vl, int64_t valid, int64_t first, int64_t V,
                                double scale) = nullptr;

    // Llama-family pieces (null where a device has none yet; the model asks
    // decoder_supported() before it builds). RMSNorm as ops/rms_norm.h: rstd
    // (N) f32; dw +=, dx overwritten unless accumulate_dx.
    void (*rms_norm_forward)(const OpCtx&, void* y, float* rstd, const void* x, const void* w,
                             int64_t N, int64_t C, double eps) = nullptr;
    void (*rms_norm_backward)(const OpCtx&, void* dx, void* dw, const void* dy, const void* x,
                              const void* w, const float* rstd, int64_t N, int64_t C,
                              bool accumulate_dx) = nullptr;
    // In place on `heads` heads of size d of every (B, T) row of stride ld
    // (ops/rope.h); inverse: the backward. positions (B, T) in the backend's
    // memory, or null for 0 .. T-1.
    void (*rope)(const OpCtx&, void* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t d,
                 const RopeSpec&, bool inverse, const int64_t* positions) = nullptr;
    // GQA's key/value expansion and its gradient's group sums (ops/repeat_kv.h).
    void (*repeat_kv_forward)(const OpCtx&, void* expanded, const void* packed, int64_t N,
                              int64_t NH, int64_t NKV, int64_t d) = nullptr;
    void (*repeat_kv_backward)(const OpCtx&, void* dpacked, const void* dexpanded, int64_t N,
                               int64_t NH, int64_t NKV, int64_t d) = nullptr;
    // y (N, I) = silu(gate) * up from gu (N, 2I) (ops/swiglu.h); y in `y_type`
    // as activation_forward's. Backward overwrites dgu (N, 2I).
    void (*swiglu_forward)(const OpCtx&, void* y, DType y_type, const void* gu, int64_t N,
                           int64_t I) = nullptr;
    void (*swiglu_backward)(const OpCtx&, void* dgu, const void* gu, const void* dy, int64_t N,
                            int64_t I) = nullptr;

    // Whether attention_forward/backward take AttnMask::window (Mistral).
    bool attention_window = false;

    bool decoder_supported() const {
        return rms_norm_forward != nullptr && rms_norm_backward != nullptr && rope != nullptr &&
               repeat_kv_forward != nullptr && repeat_kv_backward != nullptr &&
               swiglu_forward != nullptr && swiglu_backward != nullptr;
    }
    bool fused_attention(const AttnShape& s) const {
        return fused_attention_forward != nullptr && fused_attention_supported(s);
    }
    bool rows_supported() const {
        return dropout_rows != nullptr && attention_rows_forward != nullptr &&
               attention_rows_backward != nullptr;
    }
};

}  // namespace loom
