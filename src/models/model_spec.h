// ModelSpec: per family, how to build a model and which task heads it has
// (torchtitan's ModelSpec idea). build_model() in models/model.h dispatches
// through this table; the trainer asks it which heads a checkpoint supports.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "io/hf_config.h"
#include "models/model.h"

namespace loom {

struct ModelSpec {
    ModelFamily family;
    std::string_view name;
    std::unique_ptr<Model> (*build)(const ModelConfig&);
    std::vector<TaskKind> tasks;  // supported heads (TaskKind::base included)
};

const std::vector<ModelSpec>& model_specs();
const ModelSpec& model_spec(ModelFamily family);
bool supports_task(ModelFamily family, TaskKind task);

}  // namespace loom
