// Pointwise activations, forward and backward, threaded and vectorised.
//
// gelu_erf   0.5 x (1 + erf(x / sqrt 2))                 (torch GELU, HF "gelu")
// gelu_tanh  0.5 x (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715 x^3)   (HF gelu_new)
//            computed as x * sigmoid(2u), the same function without the
//            cancellation 1 + tanh(u) suffers for very negative x.
// Backward recomputes from the forward input; dinp may alias dout.
#include "ops/activation.h"

#include <omp.h>

#include <type_traits>

#include "ops/gemm.h"
#include "ops/vec_math.h"

namespace loom {
namespace {

constexpr double k_sqrt_2_over_pi = 0.7978845608028654;
constexpr double k_inv_sqrt_2 = 0.7071067811865476;
constexpr double k_inv_sqrt_2pi = 0.3989422804014327;
constexpr double k_gelu_cubic = 0.044715;

// Grain below which threads cost more than they save (~10 us of work).
constexpr int64_t k_par_grain = 1 << 15;

template <typename T>
LOOM_VINLINE T gelu_erf_f(T x) {
    return T(0.5) * x * (T(1) + vmath::erf(x * T(k_inv_sqrt_2)));
}
template <typename T>
LOOM_VINLINE T gelu_erf_df(T x) {
    const T cdf = T(0.5) * (T(1) + vmath::erf(x * T(k_inv_sqrt_2)));
    const T pdf = T(k_inv_sqrt_2pi) * vmath::exp(T(-0.5) * x * x);
    return cdf + x * pdf;
}
template <typename T>
LOOM_VINLINE T gelu_tanh_f(T x) {
    const T u = T(k_sqrt_2_over_pi) * (x + T(k_gelu_cubic) * x * x * x);
    return x * vmath::sigmoid(T(2) * u);
}
template <typename T>
LOOM_VINLINE T gelu_tanh_df(T x) {
    const T u = T(k_sqrt_2_over_pi) * (x + T(k_gelu_cubic) * x * x * x);
    const T du = T(k_sqrt_2_over_pi) * (T(1) + T(3 * k_gelu_cubic) * x * x);
    // s = sigmoid(2u) and 1 - s = e s with e = exp(-2u): no cancellation as s -> 1.
    const T e = vmath::exp(T(-2) * u);
    const T s = T(1) / (T(1) + e);
    // d/dx [x s(2u)] = s + x s (1 - s) 2 du
    return s + T(2) * x * s * (e * s) * du;
}

// NOTE: `if (parallel: ...)`, not a bare `if`: on a combined `parallel for simd`
// a bare if clause also guards the simd part and is evaluated inside the team,
// where omp_in_parallel() is true, so the loop silently ran scalar (40x slower
// with 2 threads). Every combined construct in src/ops uses the modifier.
// O: T, or uint16_t for bf16 bits (the result rounded as it is stored).
template <typename O, typename T>
LOOM_VINLINE O stored(T x) {
    if constexpr (std::is_same_v<O, uint16_t>)
        return f32_to_bf16_bits(x);
    else
        return x;
}

bool parallel_map(int64_t n) {
    return n > k_par_grain && !omp_in_parallel();
}

template <typename T, typename O, typename F>
void map_unary(O* out, const T* inp, int64_t n, F f) {
    // Dynamic: parts are taken as threads come free, so a thread whose core
    // another process holds delays the region less (docs/cpu-contention.md).
#pragma omp parallel for simd schedule(dynamic, 8192) if (parallel : parallel_map(n))
    for (int64_t i = 0; i < n; ++i) out[i] = stored<O>(f(inp[i]));
}

// out[i] = dout[i] * df(inp[i]); out may alias dout (each element read before written).
template <typename T, typename F>
void map_grad(T* out, const T* inp, const T* dout, int64_t n, F df) {
#pragma omp parallel for simd schedule(dynamic, 8192) if (parallel : parallel_map(n))
    for (int64_t i = 0; i < n; ++i) out[i] = dout[i] * df(inp[i]);
}

}  // namespace

std::optional<Activation> activation_from_hf(std::string_view name) {
    if (name == "gelu") return Activation::gelu_erf;
    if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast")
        return Activation::gelu_tanh;
    if (name == "relu") return Activation::relu;
    if (name == "tanh") return Activation::tanh;
    return std::nullopt;
}

std::string_view activation_name(Activation a) {
    switch (a) {
        case Activation::gelu_erf:
            return "gelu";
        case Activation::gelu_tanh:
            return "gelu_new";
        case Activation::relu:
            return "relu";
        case Activation::tanh:
            return "tanh";
    }
    return "?";
}

namespace {

template <typename T, typename O>
void forward_into(O* out, const T* inp, int64_t n, Activation a) {
    switch (a) {
        case Activation::gelu_erf:
            map_unary(out, inp, n, [](T x) LOOM_VINLINE_LAMBDA { return gelu_erf_f(x); });
            break;
        case Activation::gelu_tanh:
            map_unary(out, inp, n, [](T x) LOOM_VINLINE_LAMBDA { return gelu_tanh_f(x); });
            break;
        case Activation::relu:
            map_unary(out, inp, n, [](T x) LOOM_VINLINE_LAMBDA { return x > T(0) ? x : T(0); });
            break;
        case Activation::tanh:
            map_unary(out, inp, n, [](T x) LOOM_VINLINE_LAMBDA { return vmath::tanh(x); });
            break;
    }
}

}  // namespace

template <typename T>
void activation_forward(T* out, const T* inp, int64_t n, Activation a) {
    forward_into(out, inp, n, a);
}

void activation_forward_bf16(uint16_t* out, const float* inp, int64_t n, Activation a) {
    forward_into(out, inp, n, a);
}

template <typename T>
void activation_backward(T* dinp, const T* inp, const T* dout, int64_t n, Activation a) {
    switch (a) {
        case Activation::gelu_erf:
            map_grad(dinp, inp, dout, n, [](T x) LOOM_VINLINE_LAMBDA { return gelu_erf_df(x); });
            break;
        case Activation::gelu_tanh:
            map_grad(dinp, inp, dout, n, [](T x) LOOM_VINLINE_LAMBDA { return gelu_tanh_df(x); });
            break;
        case Activation::relu:
            // torch: grad * (x > 0), so the kink at 0 gets 0.
            map_grad(dinp, inp, dout, n,
                     [](T x) LOOM_VINLINE_LAMBDA { return x > T(0) ? T(1) : T(0); });
            break;
        case Activation::tanh:
            map_grad(dinp, inp, dout, n, [](T x) LOOM_VINLINE_LAMBDA {
                const T t = vmath::tanh(x);
                return T(1) - t * t;
            });
            break;
    }
}

template void activation_forward<float>(float*, const float*, int64_t, Activation);
template void activation_forward<double>(double*, const double*, int64_t, Activation);
template void activation_backward<float>(float*, const float*, const float*, int64_t, Activation);
template void activation_backward<double>(double*, const double*, const double*, int64_t,
                                          Activation);

}  // namespace loom
