// Gradient clipping: deterministic chunked reduction, then one scale pass.
#include "optim/grad_clip.h"

#include <cmath>
#include <vector>

namespace loom {

// Through the table's backend (ops/device_ops.h): one range per trainable
// row, the parts added in row order, so the norm is the same bits whatever
// the device's split of a row.
double grad_norm_sq(const ParamTable& table,
                    const std::vector<std::pair<int64_t, int64_t>>& exclude) {
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (int i = 0; i < table.size(); ++i) {
        const ParamRow& r = table.row(i);
        if (!r.trainable) continue;
        bool skip = false;
        for (const auto& [b, e] : exclude) skip = skip || (r.offset >= b && r.offset < e);
        if (!skip) ranges.emplace_back(r.offset, r.offset + r.numel());
    }
    std::vector<double> parts(ranges.size());
    table.backend().ops().sum_squares(table.backend(), table.device_grads(), table.op_ctx().act,
                                      ranges, parts.data());
    double s = 0;
    for (double p : parts) s += p;
    return s;
}

double clip_coefficient(double total_norm, double max_norm) {
    const double c = max_norm / (total_norm + 1e-6);
    return c < 1.0 ? c : 1.0;
}

void scale_grads(ParamTable& table, double s) {
    Backend& be = table.backend();
    for (int i = 0; i < table.size(); ++i)
        if (table.row(i).trainable)
            be.ops().scale(be, table.device_grad(i), table.op_ctx().act, table.row(i).numel(),
                           float(s));
}

double clip_grad_norm(ParamTable& table, double max_norm) {
    const double total = std::sqrt(grad_norm_sq(table));
    const double c = clip_coefficient(total, max_norm);
    if (c < 1.0) scale_grads(table, c);
    return total;
}

}  // namespace loom
