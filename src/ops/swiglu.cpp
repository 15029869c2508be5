// SwiGLU forward/backward, one row per iteration (elementwise, so the
// result does not depend on the thread count).
#include "ops/swiglu.h"

#include <cmath>

#include "ops/gemm.h"

namespace loom {
namespace {

// torch's float32 silu: x / (1 + exp(-x)).
inline float silu(float g) {
    return g / (1.0f + std::exp(-g));
}

template <typename O, typename Store>
void forward_rows(O* y, const float* gu, int64_t N, int64_t I, Store store) {
    // Dynamic: parts are taken as threads come free, so a thread whose core
    // another process holds delays the region less (docs/cpu-contention.md).
#pragma omp parallel for schedule(dynamic, 8)
    for (int64_t n = 0; n < N; ++n) {
        const float* g = gu + n * 2 * I;
        const float* u = g + I;
        O* out = y + n * I;
        for (int64_t i = 0; i < I; ++i) out[i] = store(silu(g[i]) * u[i]);
    }
}

}  // namespace

void swiglu_forward(float* y, const float* gu, int64_t N, int64_t I) {
    forward_rows(y, gu, N, I, [](float v) { return v; });
}

void swiglu_forward_bf16(uint16_t* y, const float* gu, int64_t N, int64_t I) {
    forward_rows(y, gu, N, I, [](float v) { return f32_to_bf16_bits(v); });
}

void swiglu_backward(float* dgu, const float* gu, const float* dy, int64_t N, int64_t I) {
#pragma omp parallel for schedule(dynamic, 8)
    for (int64_t n = 0; n < N; ++n) {
        const float* g = gu + n * 2 * I;
        const float* u = g + I;
        const float* d = dy + n * I;
        float* dg = dgu + n * 2 * I;
        float* du = dg + I;
        for (int64_t i = 0; i < I; ++i) {
            const float s = 1.0f / (1.0f + std::exp(-g[i]));
            // d silu/dg = s (1 + g (1 - s))
            dg[i] = d[i] * u[i] * (s * (1.0f + g[i] * (1.0f - s)));
            du[i] = d[i] * (g[i] * s);
        }
    }
}

}  // namespace loom
