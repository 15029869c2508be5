// Embedding module: rows and op calls.
#include "nn/embedding.h"

#include "comm/tp_regions.h"
#include "comm/tp_vocab.h"
#include "core/check.h"
#include "ops/device_ops.h"

namespace loom {

Embedding Embedding::make(ParamTable& t, const std::string& name, int64_t V, int64_t C,
                          int64_t padding_idx, double std, InitRule init, bool trainable) {
    Embedding e;
    e.V = V;
    e.C = C;
    e.padding_idx = padding_idx;
    ParamRow r;
    r.name = name;
    r.shape = Shape{V, C};
    r.init = init;
    r.init_std = std;
    r.zero_row = init == InitRule::normal ? padding_idx : -1;
    r.decay = true;
    r.trainable = trainable;
    e.table.row = t.add(r);
    return e;
}

void Embedding::shard(ParamTable& t, const ModelTp& tp_ctx) {
    if (!tp_ctx.active()) return;
    t.shard_vocab_row(table.row, tp_ctx.size, tp_ctx.rank);
    tp = tp_ctx.buffer_comm();
}

void Embedding::forward(ActPtr out, const int64_t* ids, int64_t N, bool accumulate) const {
    if (!tp) {
        ctx.nn().embedding_forward(ctx, out, ids, table.data, N, V, C, accumulate);
        return;
    }
    // The all-reduce must see only this table's lookups, not what `out` holds.
    LOOM_ASSERT(!accumulate || tp_work,
                "a vocab-parallel lookup added into its output without "
                "the model's tp workspace");
    const ActPtr looked_up = accumulate ? tp_work : out;
    const TpVocabRange r = tp_vocab_range(V, tp->size(), tp->rank());
    ctx.nn().vocab_embedding_forward(ctx, looked_up, ids, table.data, N, V, C, r.first, r.count);
    // Megatron "g" forward: exactly one rank contributes each row.
    tp_sum_inplace(looked_up, N * C, looked_up.dtype(), *tp);
    if (accumulate) ctx.nn().add_inplace(ctx, out, looked_up, N * C);
}

void Embedding::backward(CActPtr dout, const int64_t* ids, int64_t N) const {
    if (table.grad == nullptr) return;  // frozen
    if (rows_out) {
        LOOM_ASSERT(tp == nullptr, "sparse rows of a vocab-parallel embedding");
        rows_out->table_rows = V;
        rows_out->width = C;
        rows_out->count = N;
        rows_out->ids = ids;
        rows_out->rows = dout.as<const float>();
        rows_out->padding_idx = padding_idx;
        return;
    }
    if (!tp) {
        ctx.nn().embedding_backward(ctx, table.grad, ids, dout, N, V, C, padding_idx);
        return;
    }
    // Megatron "g" bwd is the identity (dout is replicated): each rank adds
    // into its own rows only.
    const TpVocabRange r = tp_vocab_range(V, tp->size(), tp->rank());
    ctx.nn().vocab_embedding_backward(ctx, table.grad, ids, dout, N, V, C, r.first, r.count,
                                      padding_idx, tp_ids_work);
}

}  // namespace loom
