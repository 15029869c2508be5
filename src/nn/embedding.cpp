// Embedding module: rows and op calls.
#include "nn/embedding.h"

#include "ops/embedding.h"

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

void Embedding::forward(float* out, const int64_t* ids, int64_t N, bool accumulate) const {
    embedding_forward(out, ids, table.data, N, V, C, accumulate);
}

void Embedding::backward(const float* dout, const int64_t* ids, int64_t N) const {
    if (table.grad == nullptr) return;  // frozen
    embedding_backward(table.grad, ids, dout, N, V, C, padding_idx);
}

}  // namespace loom
