// The memory-bound kernels of a block, shared by both planners: the GPU
// planner prices their bytes over HBM; the CPU planner uses the share of
// them tensor parallelism does not divide (docs/cost-model.md, "Tensor
// parallel").
#include "parallel/layout_plan.h"

namespace loom {

BlockElementwiseBytes block_elementwise_bytes(const PlanModel& m, int64_t seq, double elem_bytes,
                                              bool fused_attention) {
    const double h = double(m.hidden), I = double(m.intermediate), e = elem_bytes;
    BlockElementwiseBytes b;
    // Norms (read + write each) and two bias-dropout-residual kernels (input,
    // residual, output, mask; no mask without dropout) work on whole rows on
    // every tp rank: the row-parallel layers' all-reduce hands each the sum.
    const double residual = m.hidden_dropout ? 7 : 6;
    b.replicated = (4 + 4 + 2 * residual) * h * e / 2;
    // Bias-GeLU (read + write the intermediate) or SwiGLU's silu(gate) x up
    // (read 2I, write I), on the rank's columns.
    b.mlp = (m.gated_mlp ? 3 * I : 2 * I) * e;
    // Softmax (read + write scores), attention dropout (read, write, mask),
    // on the rank's heads; a fused kernel keeps the scores on chip.
    if (!fused_attention)
        b.attention = double(m.heads) * plan_attention_keys(m, seq) *
                      (2 * e + (m.attention_dropout ? 2 * e + 1 : 0));
    return b;
}

double block_replicated_factor(const PlanModel& m, int64_t seq, int tp, double step_efficiency) {
    if (tp <= 1 || step_efficiency >= 1) return 1.0;
    // CPU attention materialises the scores (the memory plan holds them).
    const BlockElementwiseBytes b = block_elementwise_bytes(m, seq, 4.0, false);
    const double replicated_share = b.replicated / (b.replicated + b.mlp + b.attention);
    return 1.0 + (1.0 - step_efficiency) * replicated_share * double(tp - 1);
}

}  // namespace loom
