// Gradient clipping: deterministic chunked reduction, then one scale pass.
#include "optim/grad_clip.h"

#include <cmath>
#include <vector>

namespace loom {

namespace {

constexpr int64_t k_chunk = 1 << 16;

double sum_sq(const float* g, int64_t n) {
    const int64_t chunks = (n + k_chunk - 1) / k_chunk;
    std::vector<double> partial(size_t(chunks), 0.0);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
        const int64_t b = c * k_chunk, e = std::min(n, b + k_chunk);
        double s = 0;
        for (int64_t i = b; i < e; ++i) s += double(g[i]) * double(g[i]);
        partial[size_t(c)] = s;
    }
    double s = 0;
    for (double p : partial) s += p;  // fixed order
    return s;
}

}  // namespace

double grad_norm_sq(const ParamTable& table) {
    double s = 0;
    for (int i = 0; i < table.size(); ++i)
        if (table.row(i).trainable) s += sum_sq(table.grad(i), table.row(i).numel());
    return s;
}

double clip_coefficient(double total_norm, double max_norm) {
    const double c = max_norm / (total_norm + 1e-6);
    return c < 1.0 ? c : 1.0;
}

void scale_grads(ParamTable& table, double s) {
    const float f = float(s);
    for (int i = 0; i < table.size(); ++i) {
        if (!table.row(i).trainable) continue;
        float* g = table.grad(i);
        const int64_t n = table.row(i).numel();
#pragma omp parallel for schedule(static) if (n > k_chunk)
        for (int64_t k = 0; k < n; ++k) g[k] *= f;
    }
}

double clip_grad_norm(ParamTable& table, double max_norm) {
    const double total = std::sqrt(grad_norm_sq(table));
    const double c = clip_coefficient(total, max_norm);
    if (c < 1.0) scale_grads(table, c);
    return total;
}

}  // namespace loom
