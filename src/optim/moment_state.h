// The checkpoint form of Adam-style first and second moments over a
// ParamTable's flat buffers, shared by AdamW and LAMB: torch's state names
// ("exp_avg.<param>", "exp_avg_sq.<param>"), one tensor per trainable row, so
// the state is layout-free.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "core/storage.h"
#include "core/tensor.h"
#include "nn/param_table.h"

namespace loom {

// Views of m and v per trainable row; element 0 of m and v is the flat
// buffers' element `base` (the trainable span's start, FlatOptimizer).
std::map<std::string, Tensor> moment_state_tensors(const ParamTable& table,
                                                   const std::shared_ptr<Storage>& m,
                                                   const std::shared_ptr<Storage>& v,
                                                   int64_t base = 0);
// Copies saved moments into m and v; every trainable row must be present with
// its shape. `what` names the optimizer in errors.
void load_moment_state(const ParamTable& table, const std::map<std::string, Tensor>& state,
                       Storage& m, Storage& v, const char* what);

}  // namespace loom
