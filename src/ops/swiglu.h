// The SwiGLU gate of Llama-family MLPs: y = silu(g) * u, silu(g) = g sigmoid(g),
// reading g and u from the fused gate|up projection (N, 2I) (gate columns
// [0, I), up columns [I, 2I)), as transformers computes
// act_fn(gate_proj(x)) * up_proj(x) in float32.
//
// Backward overwrites dgu (N, 2I); it must not alias dy.
#pragma once

#include <cstdint>

namespace loom {

void swiglu_forward(float* y,         // (N, I)
                    const float* gu,  // (N, 2I)
                    int64_t N, int64_t I);
// The same, each result rounded to bf16 bits as stored (a bf16 GEMM's input).
void swiglu_forward_bf16(uint16_t* y, const float* gu, int64_t N, int64_t I);

void swiglu_backward(float* dgu,       // (N, 2I), overwritten
                     const float* gu,  // (N, 2I) the forward's input
                     const float* dy,  // (N, I)
                     int64_t N, int64_t I);

}  // namespace loom
