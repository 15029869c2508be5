// ModelPart: which part of a model one process builds and runs (a pipeline
// stage), here so that the schedules (parallel/) and the model builder
// (models/model_config.h) share it without parallel/ seeing models/.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace loom {

class ParamTable;

// Pipeline parallelism: the part of a model one stage builds and runs.
// Layer applications [app_begin, app_end) (ALBERT's shared layer counts once
// per application), the embeddings on the first stage, the final norm and the
// task head on the last. The default is the whole model.
struct ModelPart {
    int64_t app_begin = 0;
    int64_t app_end = -1;  // -1: through the last application
    bool embeddings = true;
    bool head = true;
    // Rows held beyond those the part runs: the rank's other model chunks
    // under interleaved schedules, so that every chunk's instance shares one
    // flat buffer (application ranges, and the embeddings / head rows).
    std::vector<std::pair<int64_t, int64_t>> also_hold;
    bool hold_embeddings = false;
    bool hold_head = false;
    // Pipeline micro-batch instances: use this table's buffers instead of
    // allocating (the same config and part; see Model::share_parameters).
    const ParamTable* share_with = nullptr;
    bool whole() const {
        return app_begin == 0 && app_end < 0 && embeddings && head && also_hold.empty();
    }
};

}  // namespace loom
