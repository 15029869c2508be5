// ModelSpec: per family, how to build a model and which task heads it has
// (torchtitan's ModelSpec idea). build_model() in models/model.h dispatches
// through this table; the trainer asks it which heads a checkpoint supports.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "models/model.h"
#include "models/model_config.h"

namespace loom {

struct ModelSpec {
    ModelFamily family;
    std::string_view name;
    std::unique_ptr<Model> (*build)(const ModelConfig&, const ModelPlacement&);
    std::vector<Task> tasks;  // supported heads (Task::base included)
};

const std::vector<ModelSpec>& model_specs();
const ModelSpec& model_spec(ModelFamily family);
bool supports_task(ModelFamily family, Task task);

}  // namespace loom
