// Linear layer: out = inp @ W^T + bias (nn.Linear) or inp @ W + bias (GPT-2 Conv1D).
//
// Accumulation rule: dweight and dbias accumulate (+=); dinp overwrites unless
// `accumulate_dinp` (several linears reading one input, e.g. q, k and v).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace loom {

// A compute type (a linear layer's GEMM operands: f32, bf16 or f16) is a
// DType; on the CPU parameters, gradients and optimizer state stay f32
// whatever it says.

enum class WeightLayout {
    out_in,  // (OC, C): torch.nn.Linear
    in_out,  // (C, OC): transformers' GPT-2 Conv1D
};

template <typename T>
void matmul_forward(T* out,           // (N, OC)
                    const T* inp,     // (N, C)
                    const T* weight,  // (OC, C) or (C, OC)
                    const T* bias,    // (OC) or null
                    int64_t N, int64_t C, int64_t OC, WeightLayout layout);

template <typename T>
void matmul_backward(T* dinp,          // (N, C) or null (input needs no gradient)
                     T* dweight,       // like weight, +=
                     T* dbias,         // (OC) or null, +=
                     const T* dout,    // (N, OC)
                     const T* inp,     // (N, C)
                     const T* weight,  // (OC, C) or (C, OC)
                     int64_t N, int64_t C, int64_t OC, WeightLayout layout,
                     bool accumulate_dinp = false);

// Mixed precision, as PyTorch's CPU autocast runs nn.Linear in bf16: every
// GEMM operand (input, weight, output gradient) is rounded to bf16, products
// accumulate in fp32 and results are fp32; the bias and its gradient stay
// fp32. Same shapes and accumulation rules as above. The rounded copies live
// in per-thread workspaces that are reused across calls. `weight16`, when
// given, is the weight already rounded (convert_f32_to_bf16 of `weight`, same
// layout): a linear rounds its weight once in forward and keeps it for
// backward. Likewise `keep_inp16` (forward), when given, receives the rounded
// input (N, C), and `inp16` (backward), when given, is that rounding, used in
// place of rounding `inp` again. Backward rounds dout and sums the bias
// gradient in one pass.
void matmul_forward_bf16(float* out, const float* inp, const float* weight, const float* bias,
                         int64_t N, int64_t C, int64_t OC, WeightLayout layout,
                         const uint16_t* weight16 = nullptr, uint16_t* keep_inp16 = nullptr);
// The same forward on an input already rounded to bf16 (inp16, (N, C)).
void matmul_forward_bf16_rounded(float* out, const uint16_t* inp16, const float* weight,
                                 const float* bias, int64_t N, int64_t C, int64_t OC,
                                 WeightLayout layout, const uint16_t* weight16 = nullptr);
void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC,
                          WeightLayout layout, bool accumulate_dinp = false,
                          const uint16_t* weight16 = nullptr, const uint16_t* inp16 = nullptr);

// fp16 mixed precision, as CUDA autocast runs nn.Linear in half: the input,
// weight and output gradient are rounded to fp16 (round to nearest even;
// past 65504 they become inf, below 2^-24 they flush to zero), and so are the
// layer's output and its weight/input gradients, the tensors autocast keeps in
// half. Products accumulate in fp32. This is what dynamic loss scaling
// (optim/loss_scale.h) exists for: unscaled gradients underflow and overly
// scaled ones overflow exactly as they would on a GPU. CPUs without fp16
// arithmetic run the GEMM itself in fp32 on the rounded values (matmul_fp16.cpp).
void matmul_forward_fp16(float* out, const float* inp, const float* weight, const float* bias,
                         int64_t N, int64_t C, int64_t OC, WeightLayout layout);
void matmul_backward_fp16(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC,
                          WeightLayout layout, bool accumulate_dinp = false);
// Rounds n floats to the nearest fp16 value, in place (inf past fp16's range).
void round_to_fp16(float* x, int64_t n);
void round_to_fp16(float* out, const float* in, int64_t n);

}  // namespace loom
