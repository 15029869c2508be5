// Embedding table module: a (V, C) row looked up by id.
//
// padding_idx follows torch: that row gets no gradient from the lookup and is
// zeroed by init. A frozen table (DistilBERT's sinusoidal positions) gets no
// gradient at all. Backward accumulates (+=).
//
// Vocab-parallel (shard, Megatron VocabParallelEmbedding): the rank holds a
// slice of the vocabulary's rows; each rank looks up the ids it owns and
// Megatron "g" all-reduces (sum, on tp) the lookups, so the output is whole
// and replicated on tp. Backward needs no collective (dout is replicated).
// The lookups are the device table's (NnOps::vocab_embedding_*), the
// all-reduce runs on the output's memory in its type.
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"
#include "nn/tp_slice.h"

namespace loom {

class Communicator;

// A lookup's gradient kept as rows instead of added into the table's gradient
// (Embedding::rows_out): row k, (width) floats at rows + k * width, belongs to
// table row ids[k]. Views into the model's buffers, valid until its next forward.
struct EmbeddingGradRows {
    int64_t offset = 0;      // flat element of the table's row 0 (ParamTable)
    int64_t table_rows = 0;  // rows of the table
    int64_t width = 0;       // floats per row
    int64_t count = 0;       // rows kept (one per looked-up id, repeats included)
    const int64_t* ids = nullptr;
    const float* rows = nullptr;
    int64_t padding_idx = -1;  // rows with this id add nothing (torch padding_idx)
    bool empty() const { return count == 0; }
};

struct Embedding {
    int64_t V = 0, C = 0;  // V global even when the table is a vocab slice
    int64_t padding_idx = -1;
    ParamRef table;
    OpCtx ctx;
    // Once vocab-parallel, the tp group's twin that reaches the table's
    // backend (ModelTp::buffer_comm); null: whole table.
    Communicator* tp = nullptr;
    // Vocab-parallel workspace of the backend's memory, the model's arena's
    // (set at each plan): (N, C) for a lookup added into its output, (N)
    // ids a device remaps in backward.
    ActPtr tp_work;
    int64_t* tp_ids_work = nullptr;
    // Set: backward records (ids, dout) here instead of adding into the
    // table's gradient (Model::set_sparse_embedding_grad). Whole tables only.
    EmbeddingGradRows* rows_out = nullptr;

    // Row "<name>" (V, C), N(0, std) with the padding row zeroed.
    static Embedding make(ParamTable& t, const std::string& name, int64_t V, int64_t C,
                          int64_t padding_idx, double std, InitRule init = InitRule::normal,
                          bool trainable = true);
    // Keeps this rank's vocabulary slice (before allocate); no-op for tp 1.
    void shard(ParamTable& t, const ModelTp& tp);
    void bind(const ParamTable& t) {
        ctx = t.op_ctx();
        table.bind(t);
    }
    // out (N, C) = table[ids]; `accumulate` adds instead of overwriting.
    void forward(ActPtr out, const int64_t* ids, int64_t N, bool accumulate = false) const;
    void backward(CActPtr dout, const int64_t* ids, int64_t N) const;
};

}  // namespace loom
