// AdamW over the flat parameter/gradient buffers, torch.optim.AdamW semantics
// (ops/adamw.h does the arithmetic).
//
// Weight decay per parameter comes from the ParamTable (ParamRow::decay: the
// trainer's HF policy excludes biases and LayerNorm weights), or applies to
// every parameter with DecayPolicy::all (what `loom forward --adamw-step` and
// the HF fixtures use). Frozen rows (trainable = false) are never touched.
// The moments m and v share the parameter buffer's layout, so a ZeRO shard of
// the flat range is a shard of the optimizer state too.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/param_table.h"
#include "ops/adamw.h"
#include "optim/optimizer.h"

namespace loom {

enum class DecayPolicy {
    table,  // ParamRow::decay decides
    all,    // every trainable parameter decays
};

class AdamW : public Optimizer {
  public:
    AdamW(ParamTable& table, const AdamWParams& hp, DecayPolicy decay = DecayPolicy::table);

    // One update with learning rate `lr` (the schedule's value for this step).
    void step(double lr) override;
    void step() { step(hp_.lr); }
    int64_t step_count() const override { return step_; }
    const AdamWParams& hyperparams() const { return hp_; }

    // Moments by parameter name ("exp_avg.<name>", "exp_avg_sq.<name>", torch's
    // names) as views, plus the step count: a layout-free checkpoint.
    std::map<std::string, Tensor> state_tensors() const override;
    // Restores moments saved by state_tensors(); every trainable row must be
    // present with its shape (errors name the tensor).
    void load_state(const std::map<std::string, Tensor>& state, int64_t step) override;

  private:
    ParamTable& table_;
    AdamWParams hp_;
    std::vector<AdamWRun> runs_;      // rows with the same decay flag, merged
    std::shared_ptr<Storage> m_, v_;  // (flat_numel) each
    int64_t step_ = 0;
};

}  // namespace loom
