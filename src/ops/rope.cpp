// Rotary embeddings: HF's float32 tables, then the pairwise turn per head.
#include "ops/rope.h"

#include <cmath>
#include <vector>

#include "core/check.h"

namespace loom {

float RopeSpec::base(int64_t seq_len, int64_t d) const {
    if (dynamic_factor == 1.0 || seq_len <= max_positions) return float(theta);
    // Each step a float32 tensor op with a Python scalar cast to float32.
    const float f = float(dynamic_factor);
    float s = f * float(seq_len);
    s = s / float(max_positions);
    s = s - float(dynamic_factor - 1.0);
    return float(theta) * std::pow(s, float(double(d) / double(d - 2)));
}

void rope_inv_freq(float* out, int64_t d, const RopeSpec& spec, int64_t seq_len) {
    LOOM_CHECK(d % 2 == 0, "rotary embeddings need an even head size, got {}", d);
    // inv_freq = 1.0 / (base ** (arange(0, d, 2).float() / d)), in float32.
    const float base = spec.base(seq_len, d);
    for (int64_t i = 0; i < d / 2; ++i) {
        const float e = float(2 * i) / float(d);
        out[i] = 1.0f / float(std::pow(double(base), double(e)));
    }
}

void rope_tables(float* cos_out, float* sin_out, int64_t T, int64_t d, const RopeSpec& spec) {
    const int64_t h = d / 2;
    std::vector<float> inv_freq(static_cast<size_t>(h));
    rope_inv_freq(inv_freq.data(), d, spec, T);
    for (int64_t t = 0; t < T; ++t) {
        // Linear scaling divides the float32 position (4.40's
        // LlamaLinearScalingRotaryEmbedding).
        const float pos = rope_position(t, spec);
        for (int64_t i = 0; i < h; ++i) {
            const float a = pos * inv_freq[size_t(i)];
            cos_out[t * h + i] = float(std::cos(double(a)));
            sin_out[t * h + i] = float(std::sin(double(a)));
        }
    }
}

void rope_apply(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t d,
                const RopeSpec& spec, bool inverse, const int64_t* positions) {
    const int64_t h = d / 2;
    if (positions != nullptr)
        for (int64_t i = 0; i < B * T; ++i)
            LOOM_CHECK(positions[i] >= 0 && positions[i] < T,
                       "rotary embeddings: position id {} of token {} outside [0, {})",
                       positions[i], i, T);
    std::vector<float> cs(size_t(T * h)), sn(size_t(T * h));
    rope_tables(cs.data(), sn.data(), T, d, spec);
    const float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for collapse(2) schedule(dynamic, 16)
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) {
            const int64_t p = positions != nullptr ? positions[b * T + t] : t;
            const float* c = cs.data() + p * h;
            const float* s = sn.data() + p * h;
            float* row = x + (b * T + t) * ld;
            for (int64_t k = 0; k < heads; ++k) {
                float* v = row + k * d;
                for (int64_t i = 0; i < h; ++i) {
                    const float lo = v[i], hi = v[i + h], si = sign * s[i];
                    // HF: x * cos + rotate_half(x) * sin, each product rounded.
                    v[i] = lo * c[i] + (-hi) * si;
                    v[i + h] = hi * c[i] + lo * si;
                }
            }
        }
}

}  // namespace loom
