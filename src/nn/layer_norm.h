// LayerNorm module: weight/bias rows and the op calls; Acts hold mean and rstd.
// `make_rms` makes the RMSNorm variant of the Llama family (weight only, no
// mean subtraction, ops/rms_norm.h) in the same slot, so a block and the
// stack's final norm take either without knowing which.
//
// dweight/dbias accumulate; dx overwrites unless accumulate_dx (residual
// stream), as in ops/layer_norm.h.
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"

namespace loom {

struct LayerNorm {
    int64_t C = 0;
    double eps = 1e-12;
    bool rms = false;       // RMSNorm: bias undefined, mean unused
    ParamRef weight, bias;
    OpCtx ctx;

    struct Acts {
        float* mean = nullptr;  // (N)
        float* rstd = nullptr;  // (N)
        void plan(ActArena& a, int64_t N) {
            mean = a.take(N);
            rstd = a.take(N);
        }
    };

    // Rows "<prefix>.weight" (ones) and "<prefix>.bias" (zeros), no weight decay.
    static LayerNorm make(ParamTable& t, const std::string& prefix, int64_t C, double eps,
                          bool head = false);
    // Row "<prefix>.weight" (ones), no weight decay, no bias.
    static LayerNorm make_rms(ParamTable& t, const std::string& prefix, int64_t C, double eps);
    void bind(const ParamTable& t) {
        ctx = t.op_ctx();
        weight.bind(t);
        bias.bind(t);
    }
    void forward(ActPtr y, Acts& acts, CActPtr x, int64_t N) const;
    void backward(ActPtr dx, CActPtr dy, CActPtr x, const Acts& acts, int64_t N,
                  bool accumulate_dx = false) const;
};

}  // namespace loom
