// The family table and build_model / Model::load.
#include "models/model_spec.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"
#include "core/tensor_source.h"
#include "models/bert.h"
#include "models/gpt2.h"
#include "models/llama.h"

namespace loom {

const std::vector<ModelSpec>& model_specs() {
    using T = Task;
    static const std::vector<ModelSpec> specs = {
        {ModelFamily::bert, "bert", build_bert_family,
         {T::base, T::masked_lm, T::sequence_classification, T::question_answering}},
        {ModelFamily::roberta, "roberta", build_bert_family,
         {T::base, T::masked_lm, T::sequence_classification, T::question_answering}},
        {ModelFamily::distilbert, "distilbert", build_bert_family,
         {T::base, T::masked_lm, T::sequence_classification, T::question_answering}},
        {ModelFamily::albert, "albert", build_bert_family,
         {T::base, T::masked_lm, T::sequence_classification, T::question_answering}},
        {ModelFamily::gpt2, "gpt2", build_gpt2, {T::base, T::causal_lm}},
        {ModelFamily::llama, "llama", build_llama,
         {T::base, T::causal_lm, T::sequence_classification}},
        {ModelFamily::mistral, "mistral", build_llama, {T::base, T::causal_lm}},
        {ModelFamily::qwen2, "qwen2", build_llama, {T::base, T::causal_lm}},
    };
    return specs;
}

const ModelSpec& model_spec(ModelFamily family) {
    for (const auto& s : model_specs())
        if (s.family == family) return s;
    LOOM_FAIL("no model spec for family '{}'", family_name(family));
}

bool supports_task(ModelFamily family, Task task) {
    for (Task t : model_spec(family).tasks)
        if (t == task) return true;
    return false;
}

int64_t model_layer_applications(const ModelConfig& config) {
    // ALBERT runs its inner group (inner_group_num layers) once per hidden layer.
    return config.num_hidden_layers *
           (config.family == ModelFamily::albert ? std::max<int64_t>(config.inner_group_num, 1) : 1);
}

std::unique_ptr<Model> build_model(const ModelConfig& config, const ModelPlacement& placement) {
    const ModelSpec& spec = model_spec(config.family);
    if (!supports_task(config.family, config.task)) {
        std::string tasks;
        for (Task t : spec.tasks) tasks += fmt::format("{}{}", tasks.empty() ? "" : ", ", task_name(t));
        LOOM_FAIL("{}: task '{}' is not supported for {} (supported: {})", config.source,
                  task_name(config.task), spec.name, tasks);
    }
    return spec.build(config, placement);
}

LoadReport Model::load(const TensorSource& file, uint64_t init_seed) {
    return table_.load(file, config_.source.empty() ? "the model config" : config_.source,
                       init_seed);
}

}  // namespace loom
