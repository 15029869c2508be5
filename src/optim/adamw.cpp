// AdamW on the host: the flat optimizer over the CPU backend.
#include "optim/adamw.h"

namespace loom {

OptimizerConfig adamw_config(const AdamWParams& hp, DecayPolicy decay) {
    OptimizerConfig c;
    c.kind = OptimizerKind::adamw;
    c.hp = hp;
    c.decay = decay;
    return c;
}

AdamW::AdamW(ParamTable& table, const AdamWParams& hp, DecayPolicy decay)
    : FlatOptimizer(table, adamw_config(hp, decay)), hp_(hp) {}

}  // namespace loom
