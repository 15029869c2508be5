// ModelPlacement: what this process builds of a model, given to build_model
// next to the ModelConfig (which holds the config.json math only).
//
// The pipeline stage (ModelPart: layer applications, embeddings, head, rows
// held for other chunks, buffers shared with another instance) and the
// tensor-parallel slice (ModelTp), and the device its parameters and
// activations live on (ParamDevice; the CPU by default). The default builds
// the whole model. The
// trainer derives it from the layout; a built model keeps its copy
// (Model::placement()).
#pragma once

#include "nn/param_table.h"
#include "nn/tp_slice.h"
#include "parallel/model_part.h"

namespace loom {

struct ModelPlacement {
    ModelPart part;
    ModelTp tp;
    ParamDevice device;
};

}  // namespace loom
