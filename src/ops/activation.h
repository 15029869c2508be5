// Pointwise activations: gelu (exact erf), gelu_new (tanh approximation), relu, tanh.
//
// dinp overwrites and may alias dout (in-place backward).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace loom {

enum class Activation { gelu_erf, gelu_tanh, relu, tanh };

// HF `hidden_act` / `activation_function` names: "gelu" -> gelu_erf;
// "gelu_new", "gelu_pytorch_tanh", "gelu_fast" -> gelu_tanh; "relu"; "tanh".
std::optional<Activation> activation_from_hf(std::string_view name);
std::string_view activation_name(Activation a);

template <typename T>
void activation_forward(T* out, const T* inp, int64_t n, Activation a);
// The same, each result rounded to bf16 bits as it is stored (what a bf16
// linear reading the output would round it to): one pass, no fp32 copy.
void activation_forward_bf16(uint16_t* out, const float* inp, int64_t n, Activation a);

// Uses the forward input (not output) so every activation has one signature.
template <typename T>
void activation_backward(T* dinp, const T* inp, const T* dout, int64_t n, Activation a);

}  // namespace loom
