// AdamW on the host: the flat optimizer over the CPU backend.
#include "optim/adamw.h"

namespace loom {

UpdateBuffers host_target(ParamTable& table) {
    UpdateBuffers b;
    b.master = table.params_data();
    b.grad = table.grads_data();
    return b;
}

OptimizerConfig adamw_config(const AdamWParams& hp, DecayPolicy decay) {
    OptimizerConfig c;
    c.kind = OptimizerKind::adamw;
    c.hp = hp;
    c.decay = decay;
    return c;
}

AdamW::AdamW(ParamTable& table, const AdamWParams& hp, DecayPolicy decay)
    : FlatOptimizer(cpu_backend(), table, adamw_config(hp, decay), host_target(table)), hp_(hp) {}

}  // namespace loom
