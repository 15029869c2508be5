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
void matmul_backward(T* dinp,         // (N, C) or null (input needs no gradient)
                     T* dweight,      // like weight, +=
                     T* dbias,        // (OC) or null, +=
                     const T* dout,   // (N, OC)
                     const T* inp,    // (N, C)
                     const T* weight, // (OC, C) or (C, OC)
                     int64_t N, int64_t C, int64_t OC, WeightLayout layout,
                     bool accumulate_dinp = false);

}  // namespace loom
