// Batch -> ModelInputs with shape checks.
#include "models/model_inputs.h"

#include "core/check.h"

namespace loom {

std::vector<std::string> label_keys(TaskKind task) {
    switch (task) {
        case TaskKind::base: return {};
        case TaskKind::question_answering: return {"start_positions", "end_positions"};
        default: return {"labels"};
    }
}

ModelInputs inputs_from_batch(const Batch& batch, const ModelConfig& config, bool require_labels) {
    const Tensor& ids = batch.require("input_ids");
    LOOM_CHECK(ids.shape.ndim == 2 && ids.shape[0] > 0 && ids.shape[1] > 0,
               "{}: 'input_ids' must have shape [B, T], found {}", batch.path,
               ids.shape.to_string());
    ModelInputs in;
    in.B = ids.shape[0];
    in.T = ids.shape[1];
    in.input_ids = ids.data<int64_t>();
    const Shape bt{in.B, in.T}, b{in.B};
    auto check_shape = [&](const Tensor& t, const std::string& key, const Shape& want) {
        LOOM_CHECK(t.shape == want, "{}: '{}' has shape {}, expected {} (input_ids is {})",
                   batch.path, key, t.shape.to_string(), want.to_string(), ids.shape.to_string());
        return t.data<int64_t>();
    };
    // find() hands back a copy of the view; the data stays owned by `batch`.
    if (auto t = batch.find("attention_mask")) in.attention_mask = check_shape(*t, "attention_mask", bt);
    if (auto t = batch.find("token_type_ids")) in.token_type_ids = check_shape(*t, "token_type_ids", bt);

    const std::vector<std::string> keys = label_keys(config.task);
    if (keys.empty()) return in;
    if (!require_labels) {
        bool all = true;
        for (const auto& k : keys) all = all && batch.contains(k);
        if (!all) return in;  // forward only, no loss
    }
    switch (config.task) {
        case TaskKind::sequence_classification:
            in.labels = check_shape(batch.require("labels"), "labels", b);
            break;
        case TaskKind::question_answering:
            in.start_positions = check_shape(batch.require("start_positions"), "start_positions", b);
            in.end_positions = check_shape(batch.require("end_positions"), "end_positions", b);
            break;
        default: in.labels = check_shape(batch.require("labels"), "labels", bt); break;
    }
    return in;
}

}  // namespace loom
