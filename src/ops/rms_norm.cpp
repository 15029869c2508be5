// RMSNorm forward/backward over rows of (N, C), threaded over rows.
//
// Row sums run in double, one row per iteration in index order, so a row's
// result is the same whatever the thread count. dweight is summed through
// fixed groups of k_group rows, then group by group in order, for the same
// reason (tensor-parallel ranks compute it redundantly and must agree bit for
// bit).
#include "ops/rms_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace loom {
namespace {

constexpr int64_t k_group = 32;  // rows per partial dweight sum

}  // namespace

void rms_norm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                      int64_t C, double eps) {
    // Dynamic: parts are taken as threads come free, so a thread whose core
    // another process holds delays the region less (docs/cpu-contention.md).
#pragma omp parallel for schedule(dynamic, 8)
    for (int64_t n = 0; n < N; ++n) {
        const float* x = inp + n * C;
        double ss = 0;
        for (int64_t i = 0; i < C; ++i) ss += double(x[i]) * double(x[i]);
        // HF: x * torch.rsqrt(variance + eps) in float32, then weight * that.
        const float var = float(ss / double(C));
        const float r = float(1.0 / std::sqrt(double(var + float(eps))));
        rstd[n] = r;
        float* y = out + n * C;
        for (int64_t i = 0; i < C; ++i) y[i] = weight[i] * (x[i] * r);
    }
}

void rms_norm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                       const float* weight, const float* rstd, int64_t N, int64_t C,
                       bool accumulate_dinp) {
    // y_i = w_i x_i r, r = (mean(x^2) + eps)^-1/2, dr/dx_j = -r^3 x_j / C:
    //   dx_j = r w_j dy_j - (r^3 / C) x_j sum_i(w_i dy_i x_i)
#pragma omp parallel for schedule(dynamic, 8)
    for (int64_t n = 0; n < N; ++n) {
        const float* x = inp + n * C;
        const float* dy = dout + n * C;
        float* dx = dinp + n * C;
        const double r = rstd[n];
        double dot = 0;
        for (int64_t i = 0; i < C; ++i) dot += double(weight[i]) * dy[i] * x[i];
        const double k = r * r * r * dot / double(C);
        for (int64_t i = 0; i < C; ++i) {
            const float g = float(r * double(weight[i]) * dy[i] - k * x[i]);
            dx[i] = accumulate_dinp ? dx[i] + g : g;
        }
    }
    if (dweight == nullptr) return;  // a frozen weight
    const int64_t groups = (N + k_group - 1) / k_group;
    std::vector<double> part(size_t(groups * C), 0.0);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t g = 0; g < groups; ++g) {
        double* p = part.data() + g * C;
        const int64_t end = std::min(N, (g + 1) * k_group);
        for (int64_t n = g * k_group; n < end; ++n) {
            const float* x = inp + n * C;
            const float* dy = dout + n * C;
            const double r = rstd[n];
            for (int64_t i = 0; i < C; ++i) p[i] += double(dy[i]) * x[i] * r;
        }
    }
    for (int64_t i = 0; i < C; ++i) {
        double s = 0;
        for (int64_t g = 0; g < groups; ++g) s += part[size_t(g * C + i)];
        dweight[i] += float(s);
    }
}

}  // namespace loom
