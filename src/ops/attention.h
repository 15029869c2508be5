// Multi-head scaled dot-product attention with padding and causal masks.
//
// Scores are q k^T / sqrt(HS), masked keys get weight exactly 0 (HF adds or
// substitutes float32's lowest value, which underflows to 0 after softmax); a
// row with every key masked gets uniform weights, as HF's arithmetic gives:
// over all T keys without a causal mask; with one, over the keys j <= i plus
// the unpadded keys j > i (GPT-2 replaces hidden scores by lowest and then adds
// lowest for padding, so only hidden-and-padded keys reach -inf). Backward
// gives such rows no q/k gradient (their output does not depend on q or k).
// Softmax runs in fp32 (fp64 for double). Attention-probability dropout is keyed
// by (global sample, global head, query, key), so tensor-parallel head splits
// draw the same mask.
//
// q, k and v are (B, T, NH*HS) views with row stride `ld` elements: C for
// separate projections, 3C for GPT-2's packed c_attn (q at +0, k at +C, v at +2C).
// Backward overwrites dq, dk, dv (same strides as q, k, v).
#pragma once

#include <cstdint>

#include "ops/dropout.h"

namespace loom {

struct AttnShape {
    int64_t B, T, NH, HS;
    int64_t head_offset = 0;  // global index of local head 0 (tensor parallel)
    int64_t NH_total = 0;     // global head count; 0 means NH
};

struct AttnMask {
    const int64_t* key_padding = nullptr;  // (B, T): 1 = attend, 0 = padding; null = none
    bool causal = false;
    // Mistral's sliding window (causal only): query i sees keys i - window ..
    // i, window + 1 keys with itself; -1: no window. Only the unfused CPU
    // entries take one (attention.cpp); the others assert it is absent.
    int64_t window = -1;
    // Packed documents: (B, T) the first key query t may see, the start of its
    // document (keys before it get weight 0, like those before a window);
    // null: 0. In the memory of the device the kernel runs on. Not taken by
    // the query-row entries (attention_rows.h).
    const int64_t* key_start = nullptr;
};

template <typename T>
void attention_forward(T* out,          // (B, T, NH*HS) contiguous
                       T* att,          // (B, NH, T, T) softmax probabilities, before dropout
                       const T* q, const T* k, const T* v, int64_t ld, const AttnShape& s,
                       const AttnMask& mask, const DropoutSpec& drop);

template <typename T>
void attention_backward(T* dq, T* dk, T* dv,  // like q, k, v (stride ld), overwritten
                        T* scratch,           // (B, NH, T, T) workspace; holds dS on return
                        const T* dout,        // (B, T, NH*HS)
                        const T* att,         // (B, NH, T, T) from forward
                        const T* q, const T* k, const T* v, int64_t ld, const AttnShape& s,
                        const AttnMask& mask, const DropoutSpec& drop);

// bf16 autocast, as PyTorch's runs attention's matmuls: the operands of the six
// GEMMs (q, k, v, dout, the probabilities after dropout, and dS, the gradient
// of the scaled scores) are rounded to bf16, products accumulate in fp32, and
// att, scratch, out and the gradients are fp32. Masks, softmax, dropout and
// the softmax backward are the fp32 kernel's, unchanged. Same arguments as the
// float kernels; the rounded copies live in per-thread buffers reused across
// calls.
void attention_forward_bf16(float* out, float* att, const float* q, const float* k, const float* v,
                            int64_t ld, const AttnShape& s, const AttnMask& mask,
                            const DropoutSpec& drop);
void attention_backward_bf16(float* dq, float* dk, float* dv, float* scratch, const float* dout,
                             const float* att, const float* q, const float* k, const float* v,
                             int64_t ld, const AttnShape& s, const AttnMask& mask,
                             const DropoutSpec& drop);

// Whether every query row of every sample sees at least one key, the
// precondition of fused (flash) kernels, which lack the uniform-weights rule
// above. key_padding_host is (B, T) host memory (1 = attend, 0 = padding) or
// null; key_start_host the AttnMask::key_start bounds in host memory or null.
// Without a causal mask a sample needs one unpadded key; with one, its
// first key must be unpadded (query 0 sees only key 0, and then every query
// sees it); with key bounds, every query needs an unpadded key in its range.
bool attention_every_row_has_a_key(const int64_t* key_padding_host, int64_t B, int64_t T,
                                   bool causal, const int64_t* key_start_host = nullptr);

}  // namespace loom
