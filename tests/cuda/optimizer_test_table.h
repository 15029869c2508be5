// The ParamTable the CUDA optimizer tests update: weights that decay, a bias
// and a LayerNorm weight that do not, a weight at zero (LAMB's trust ratio 1
// before its first update), a frozen row the optimizers must leave alone, and
// a row long enough to span several LAMB tiles. Parameters are random in
// [-0.5, 0.5).
#pragma once

#include <cstring>
#include <memory>

#include "cuda_test_util.h"
#include "nn/param_table.h"

namespace loom::test {

inline std::unique_ptr<ParamTable> make_optimizer_table() {
    auto t = std::make_unique<ParamTable>();
    auto add = [&](const char* name, Shape s, bool decay, bool trainable = true) {
        ParamRow r;
        r.name = name;
        r.shape = s;
        r.decay = decay;
        r.trainable = trainable;
        t->add(r);
    };
    add("dense.weight", Shape{300, 50}, true);
    add("dense.bias", Shape{50}, false);
    add("zero.weight", Shape{7, 3}, true);
    add("LayerNorm.weight", Shape{50}, false);
    add("frozen.weight", Shape{40}, true, false);
    add("big.weight", Shape{9001}, true);
    t->allocate();
    auto p = random_vec(size_t(t->flat_numel()), 7, -0.5f, 0.5f);
    std::memcpy(t->params_data(), p.data(), p.size() * sizeof(float));
    std::memset(t->param(t->index("zero.weight")), 0, 21 * sizeof(float));
    return t;
}

}  // namespace loom::test
