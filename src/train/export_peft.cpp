// PEFT adapter folders and merged weights (see export_peft.h).
#include "train/export_peft.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "io/file_utils.h"
#include "io/safetensors.h"

namespace loom {

namespace {

const std::string k_prefix = "base_model.model.";

// PEFT's TaskType for a job's task (null: PEFT has none, e.g. masked LM).
nlohmann::json peft_task_type(Task t) {
    switch (t) {
        case Task::causal_lm:
            return "CAUSAL_LM";
        case Task::sequence_classification:
            return "SEQ_CLS";
        case Task::question_answering:
            return "QUESTION_ANS";
        default:
            return nullptr;
    }
}

// A number as Python writes it: 8 for an integral alpha given as 8.
nlohmann::json py_number(double v) {
    if (v == std::floor(v) && std::fabs(v) < 1e15) return int64_t(v);
    return v;
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string adapter_config_json(const LoraSpec& spec, Task task,
                                const std::string& base_model_name_or_path) {
    std::vector<std::string> targets = spec.target_modules;
    std::sort(targets.begin(), targets.end());
    nlohmann::json j;
    j["alpha_pattern"] = nlohmann::json::object();
    j["auto_mapping"] = nullptr;
    j["base_model_name_or_path"] = base_model_name_or_path;
    j["bias"] = "none";
    j["fan_in_fan_out"] = false;
    j["inference_mode"] = true;  // how PEFT saves
    j["init_lora_weights"] = true;
    j["layer_replication"] = nullptr;
    j["layers_pattern"] = nullptr;
    j["layers_to_transform"] = nullptr;
    j["loftq_config"] = nlohmann::json::object();
    j["lora_alpha"] = py_number(spec.lora_alpha);
    j["lora_dropout"] = double(spec.lora_dropout);  // a float, as PEFT writes it
    j["megatron_config"] = nullptr;
    j["megatron_core"] = "megatron.core";
    j["modules_to_save"] = spec.modules_to_save.empty() ? nlohmann::json(nullptr)
                                                        : nlohmann::json(spec.modules_to_save);
    j["peft_type"] = "LORA";
    j["r"] = spec.r;
    j["rank_pattern"] = nlohmann::json::object();
    j["revision"] = nullptr;
    j["target_modules"] = targets;
    j["task_type"] = peft_task_type(task);
    j["use_dora"] = false;
    j["use_rslora"] = false;
    return j.dump(2);
}

std::map<std::string, Tensor> adapter_tensors(const ParamTable& table) {
    std::map<std::string, Tensor> out;
    for (int i = 0; i < table.size(); ++i) {
        const ParamRow& r = table.row(i);
        if (!r.local || !r.trainable) continue;  // adapters and modules_to_save rows
        out[k_prefix + r.name] = table.param_tensor(i);
    }
    return out;
}

std::map<std::string, Tensor> merged_tensors(const ParamTable& table, const LoraSpec& spec,
                                             bool conv1d) {
    std::map<std::string, Tensor> out;
    for (int i = 0; i < table.size(); ++i) {
        const ParamRow& r = table.row(i);
        if (r.local && !r.adapter) out[r.name] = table.param_tensor(i);
    }
    const float s = float(spec.scaling());
    const std::string a_suffix = ".lora_A.weight";
    for (int i = 0; i < table.size(); ++i) {
        const ParamRow& ra = table.row(i);
        if (!ra.adapter || !ends_with(ra.name, a_suffix)) continue;
        const std::string module = ra.name.substr(0, ra.name.size() - a_suffix.size());
        const int ib = table.index(module + ".lora_B.weight");
        const int iw = table.index(module + ".weight");
        const int64_t R = ra.shape[0], in = ra.shape[1], o = table.row(ib).shape[0];
        const float* A = table.param(i);
        const float* B = table.param(ib);
        Tensor w = table.param_tensor(iw).clone();
        LOOM_ASSERT(w.shape == (conv1d ? Shape{in, o} : Shape{o, in}),
                    "merge: '{}' is {}, its adapter is ({}, {})", w.name, w.shape.to_string(), o,
                    in);
        float* W = static_cast<float*>(w.raw());
        for (int64_t p = 0; p < o; ++p)
            for (int64_t q = 0; q < in; ++q) {
                float d = 0;  // (B @ A)[p, q] in fp32, then * scaling, then added
                for (int64_t k = 0; k < R; ++k) d += B[p * R + k] * A[k * in + q];
                float& x = conv1d ? W[q * o + p] : W[p * in + q];
                x = x + d * s;
            }
        out[table.row(iw).name] = w;
    }
    return out;
}

void export_peft_adapter(const std::string& dir, const ParamTable& table, const LoraSpec& spec,
                         Task task, const std::string& base_model_name_or_path) {
    std::filesystem::create_directories(dir);
    safetensors_write((std::filesystem::path(dir) / "adapter_model.safetensors").string(),
                      adapter_tensors(table), {{"format", "pt"}});
    write_file_atomic((std::filesystem::path(dir) / "adapter_config.json").string(),
                      adapter_config_json(spec, task, base_model_name_or_path));
}

std::vector<std::string> peft_default_targets(ModelFamily family) {
    switch (family) {
        case ModelFamily::bert:
        case ModelFamily::roberta:
        case ModelFamily::albert:
            return {"query", "value"};
        case ModelFamily::distilbert:
            return {"q_lin", "v_lin"};
        case ModelFamily::gpt2:
            return {"c_attn"};
        default:
            return {"q_proj", "v_proj"};
    }
}

}  // namespace loom
