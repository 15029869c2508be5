// VocabXent: the device table's local steps between the tp collectives.
#include "nn/vocab_xent.h"

#include "comm/comm.h"
#include "comm/tp_vocab.h"
#include "core/check.h"
#include "ops/device_ops.h"
#include "ops/vocab_parallel.h"

namespace loom {

XentSum VocabXent::forward(const OpCtx& ctx, CActPtr logits, const int64_t* targets, int64_t N,
                           int64_t V) const {
    LOOM_ASSERT(tp != nullptr && N <= planned_rows,
                "vocab-parallel cross-entropy of {} rows, {} planned", N, planned_rows);
    const NnOps& ops = ctx.nn();
    const TpVocabRange r = tp_vocab_range(V, tp->size(), tp->rank());
    const int64_t valid = vocab_slice_valid(V, r.first, r.count);
    ops.vocab_xent_max(ctx, row_max, logits, N, r.count, valid);
    if (tp->size() > 1 && N > 0) tp->all_reduce(row_max, N, DType::f32, ReduceOp::max)->wait();
    ops.vocab_xent_stats(ctx, stats, logits, targets, row_max, N, r.count, valid, r.first, V);
    if (tp->size() > 1 && N > 0) tp->all_reduce(stats, 2 * N, DType::f32, ReduceOp::sum)->wait();
    return ops.vocab_xent_loss(ctx, row_max, stats, targets, N, V);
}

void VocabXent::backward(const OpCtx& ctx, ActPtr dlogits, CActPtr logits, const int64_t* targets,
                         int64_t N, int64_t V, double scale) const {
    const TpVocabRange r = tp_vocab_range(V, tp->size(), tp->rank());
    const int64_t valid = vocab_slice_valid(V, r.first, r.count);
    ctx.nn().vocab_xent_backward(ctx, dlogits, logits, targets, row_max, stats, N, r.count, valid,
                                 r.first, V, scale);
}

}  // namespace loom
