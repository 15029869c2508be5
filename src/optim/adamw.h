// AdamW over a ParamTable's flat buffers on the host, torch.optim.AdamW
// semantics (ops/adamw.h does the arithmetic): FlatOptimizer on the CPU
// backend.
//
// Weight decay per parameter comes from the ParamTable (ParamRow::decay: the
// trainer's HF policy excludes biases and LayerNorm weights), or applies to
// every parameter with DecayPolicy::all (what `loom forward --adamw-step` and
// the HF fixtures use). Frozen rows (trainable = false) are never touched.
// The moments m and v share the parameter buffer's layout, so a ZeRO shard of
// the flat range is a shard of the optimizer state too.
#pragma once

#include "nn/param_table.h"
#include "ops/adamw.h"
#include "optim/flat_optimizer.h"

namespace loom {

class AdamW : public FlatOptimizer {
  public:
    AdamW(ParamTable& table, const AdamWParams& hp, DecayPolicy decay = DecayPolicy::table);

    using FlatOptimizer::step;
    void step() { step(hp_.lr); }
    const AdamWParams& hyperparams() const { return hp_; }

  private:
    AdamWParams hp_;
};

// AdamW with `hp` as an optimizer configuration.
OptimizerConfig adamw_config(const AdamWParams& hp, DecayPolicy decay = DecayPolicy::table);

}  // namespace loom
