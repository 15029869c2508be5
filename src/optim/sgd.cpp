// SGD on the host: the flat optimizer over the CPU backend.
#include "optim/sgd.h"

namespace loom {

namespace {

OptimizerConfig sgd_config(double weight_decay, DecayPolicy decay) {
    OptimizerConfig c;
    c.kind = OptimizerKind::sgd;
    c.hp.weight_decay = weight_decay;
    c.decay = decay;
    return c;
}

}  // namespace

Sgd::Sgd(ParamTable& table, double weight_decay, DecayPolicy decay)
    : FlatOptimizer(table, sgd_config(weight_decay, decay)) {}

}  // namespace loom
