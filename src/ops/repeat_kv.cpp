// repeat_kv: copies and group sums, one row per iteration. A group's
// gradients are summed in head order, so the result does not depend on the
// thread count.
#include "ops/repeat_kv.h"

#include <cstring>

namespace loom {

void repeat_kv_forward(float* expanded, const float* packed, int64_t N, int64_t NH, int64_t NKV,
                       int64_t d) {
    const int64_t C = NH * d, KV = NKV * d, group = NH / NKV;
    const int64_t lp = C + 2 * KV, le = 3 * C;
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t n = 0; n < N; ++n) {
        const float* p = packed + n * lp;
        float* e = expanded + n * le;
        std::memcpy(e, p, size_t(C) * sizeof(float));
        for (int64_t h = 0; h < NH; ++h) {
            const int64_t kv = h / group;
            std::memcpy(e + C + h * d, p + C + kv * d, size_t(d) * sizeof(float));
            std::memcpy(e + 2 * C + h * d, p + C + KV + kv * d, size_t(d) * sizeof(float));
        }
    }
}

void repeat_kv_backward(float* dpacked, const float* dexpanded, int64_t N, int64_t NH, int64_t NKV,
                        int64_t d) {
    const int64_t C = NH * d, KV = NKV * d, group = NH / NKV;
    const int64_t lp = C + 2 * KV, le = 3 * C;
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t n = 0; n < N; ++n) {
        const float* e = dexpanded + n * le;
        float* p = dpacked + n * lp;
        std::memcpy(p, e, size_t(C) * sizeof(float));
        for (int64_t kv = 0; kv < NKV; ++kv)
            for (int part = 0; part < 2; ++part) {  // k, then v
                float* dst = p + C + part * KV + kv * d;
                const float* src = e + (1 + part) * C + kv * group * d;
                for (int64_t i = 0; i < d; ++i) {
                    float s = src[i];
                    for (int64_t g = 1; g < group; ++g) s += src[g * d + i];
                    dst[i] = s;
                }
            }
    }
}

}  // namespace loom
