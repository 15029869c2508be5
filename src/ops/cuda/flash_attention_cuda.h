// Fused (FlashAttention-2) multi-head attention on CUDA, forward and backward,
// with the semantics of ops/attention.h: scale 1/sqrt(HS), key-padding and
// causal masks, and attention-probability dropout keyed by (global sample,
// global head, query, key), so the kept mask is the CPU's and the unfused
// CUDA path's.
//
// Memory: the unfused path (attention_cuda.h) saves the (B, NH, T, T)
// probabilities of every layer for backward (192 MiB per layer in bf16 for
// GPT-2 small at B = 8, T = 1024) and needs as much again as workspace. These
// kernels keep query and key tiles in shared memory, run the softmax online,
// and save only the per-row log-sum-exp of the scaled scores, (B, NH, T) fp32
// (384 KiB per layer in that example); backward recomputes the probabilities
// from it. Backward's only workspace is D = rowsum(dout * out), (B, NH, T)
// fp32 from ctx.scratch().
//
// Precondition: every query row has at least one visible key. The CPU gives a
// row with every key masked uniform weights by HF's rule (ops/attention.cpp);
// these kernels do not implement that rule. Check with
// attention_every_row_has_a_key() (ops/attention.h) and take the unfused path when it fails.
// (Such a row comes out of the kernels as zeros with lse = -inf and sends no
// gradient anywhere, never as NaN.)
//
// Determinism: no atomics. dK/dV come from one kernel over key tiles and dQ
// from another over query tiles, so every output element is written once by
// one thread with a fixed summation order: bit-identical run to run.
//
// q, k, v (and dq, dk, dv) are (B, T, NH*HS) views with row stride `ld`, e.g.
// GPT-2's packed (B*T, 3C) c_attn output with ld = 3C. out and dout are
// contiguous (B, T, NH*HS). AttnMask::key_padding and key_start must point to
// device memory.
// dq/dk/dv must not overlap q, k, v, out or dout (they may share one packed
// buffer among themselves).
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "ops/attention.h"

namespace loom {

// Head sizes with compiled kernels: HS in {16, 32, 64, 80, 96, 128}. The head
// size is a template parameter (register tiles, unrolled 16-wide tensor-core
// steps), so it must be a multiple of 16 and at most 128, and each value costs
// compile time; others take the unfused path. Any B, T >= 0, NH and ld work.
bool flash_attention_supported(const AttnShape& s);

template <typename T>
void flash_attention_forward_cuda(T* out,      // (B, T, NH*HS) contiguous
                                  float* lse,  // (B, NH, T): log-sum-exp of the scaled scores
                                  const T* q, const T* k, const T* v, int64_t ld,
                                  const AttnShape& s, const AttnMask& mask, const DropoutSpec& drop,
                                  CudaContext& ctx);

template <typename T>
void flash_attention_backward_cuda(T* dq, T* dk, T* dv,  // like q, k, v (stride ld), overwritten
                                   const T* dout,        // (B, T, NH*HS)
                                   const T* out,         // (B, T, NH*HS) from forward
                                   const float* lse,     // (B, NH, T) from forward
                                   const T* q, const T* k, const T* v, int64_t ld,
                                   const AttnShape& s, const AttnMask& mask,
                                   const DropoutSpec& drop, CudaContext& ctx);

}  // namespace loom
