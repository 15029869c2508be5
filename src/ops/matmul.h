// Linear layer: out = inp @ W^T + bias (nn.Linear) or inp @ W + bias (GPT-2 Conv1D).
//
// Accumulation rule: dweight and dbias accumulate (+=); dinp overwrites unless
// `accumulate_dinp` (several linears reading one input, e.g. q, k and v).
#pragma once

#include <cstdint>

namespace loom {

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
// in per-thread workspaces that are reused across calls.
void matmul_forward_bf16(float* out, const float* inp, const float* weight, const float* bias,
                         int64_t N, int64_t C, int64_t OC, WeightLayout layout);
void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC,
                          WeightLayout layout, bool accumulate_dinp = false);

}  // namespace loom
