// CUDA multi-head attention, forward and backward (semantics of ops/attention.h).
//
// Batched cuBLASLt GEMMs around one fused masked-softmax(+dropout) kernel, as in
// llm.c's attention_forward: q, k, v are first permuted to (B, NH, T, HS) so
// every head is one strided-batch operand. Padding and causal masks, the
// all-masked-row rule (uniform weights), and the attention-dropout key
// (global sample, global head, query, key) are the CPU's. `att` saves the
// probabilities before dropout; the dropout mask is recomputed in backward.
// For bf16/f16 the scores stay fp32 between the GEMM and the softmax; att and
// the probabilities multiplied into v are stored in T, as the CPU stores them in
// its T. AttnMask::key_padding and key_start must point to device memory. Workspace for the
// permuted operands (and fp32 scores) comes from ctx.scratch().
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "ops/attention.h"

namespace loom {

template <typename T>
void attention_forward_cuda(T* out,  // (B, T, NH*HS) contiguous
                            T* att,  // (B, NH, T, T) softmax probabilities, before dropout
                            const T* q, const T* k, const T* v, int64_t ld, const AttnShape& s,
                            const AttnMask& mask, const DropoutSpec& drop, CudaContext& ctx);

template <typename T>
void attention_backward_cuda(T* dq, T* dk, T* dv,  // like q, k, v (stride ld), overwritten
                             T* scratch,           // (B, NH, T, T) workspace
                             const T* dout,        // (B, T, NH*HS)
                             const T* att,         // (B, NH, T, T) from forward
                             const T* q, const T* k, const T* v, int64_t ld, const AttnShape& s,
                             const AttnMask& mask, const DropoutSpec& drop, CudaContext& ctx);

}  // namespace loom
