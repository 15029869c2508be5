// Embedding table module: a (V, C) row looked up by id.
//
// padding_idx follows torch: that row gets no gradient from the lookup and is
// zeroed by init. A frozen table (DistilBERT's sinusoidal positions) gets no
// gradient at all. Backward accumulates (+=).
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"

namespace loom {

struct Embedding {
    int64_t V = 0, C = 0;
    int64_t padding_idx = -1;
    ParamRef table;

    // Row "<name>" (V, C), N(0, std) with the padding row zeroed.
    static Embedding make(ParamTable& t, const std::string& name, int64_t V, int64_t C,
                          int64_t padding_idx, double std, InitRule init = InitRule::normal,
                          bool trainable = true);
    void bind(const ParamTable& t) { table.bind(t); }
    // out (N, C) = table[ids]; `accumulate` adds instead of overwriting.
    void forward(float* out, const int64_t* ids, int64_t N, bool accumulate = false) const;
    void backward(const float* dout, const int64_t* ids, int64_t N) const;
};

}  // namespace loom
