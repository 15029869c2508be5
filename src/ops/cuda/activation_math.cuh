// Activation values and derivatives in fp32, shared by the activation kernels and
// the matmul epilogue fallbacks. Formulas are the CPU's (ops/activation.cpp):
// gelu = x * Phi(x); gelu_new = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3),
// evaluated as x * sigmoid(2u), which avoids the cancellation in 1 + tanh(u)
// for very negative x.
#pragma once

#include "ops/activation.h"

namespace loom::gpu {

constexpr float k_sqrt_2_over_pi = 0.7978845608028654f;
constexpr float k_inv_sqrt_2 = 0.7071067811865476f;
constexpr float k_inv_sqrt_2pi = 0.3989422804014327f;
constexpr float k_gelu_cubic = 0.044715f;
constexpr float k_gelu_cubic3 = float(3 * 0.044715);

__device__ __forceinline__ float sigmoid(float z) {
    return 1.0f / (1.0f + expf(-z));
}

__device__ __forceinline__ float act_value(float x, Activation a) {
    switch (a) {
        case Activation::gelu_erf:
            return 0.5f * x * (1.0f + erff(x * k_inv_sqrt_2));
        case Activation::gelu_tanh: {
            float u = k_sqrt_2_over_pi * (x + k_gelu_cubic * x * x * x);
            return x * sigmoid(2.0f * u);
        }
        case Activation::relu:
            return x > 0.0f ? x : 0.0f;
        case Activation::tanh:
            return tanhf(x);
    }
    return x;
}

__device__ __forceinline__ float act_grad(float x, Activation a) {
    switch (a) {
        case Activation::gelu_erf:
            return 0.5f * (1.0f + erff(x * k_inv_sqrt_2)) +
                   x * k_inv_sqrt_2pi * expf(-0.5f * x * x);
        case Activation::gelu_tanh: {
            float u = k_sqrt_2_over_pi * (x + k_gelu_cubic * x * x * x);
            float du = k_sqrt_2_over_pi * (1.0f + k_gelu_cubic3 * x * x);
            // s = sigmoid(2u) and 1 - s = e s with e = exp(-2u): no cancellation as s -> 1.
            float e = expf(-2.0f * u);
            float s = 1.0f / (1.0f + e);
            // d/dx [x s(2u)] = s + x s (1 - s) 2 du
            return s + 2.0f * x * s * (e * s) * du;
        }
        case Activation::relu:
            return x > 0.0f ? 1.0f : 0.0f;
        case Activation::tanh: {
            float t = tanhf(x);
            return 1.0f - t * t;
        }
    }
    return 1.0f;
}

}  // namespace loom::gpu
