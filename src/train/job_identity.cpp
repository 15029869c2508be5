// Job identity (job_identity.h): job_to_yaml flattened to dotted keys, minus
// the keys that do not define the run.
#include "train/job_identity.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>

#include "core/check.h"

namespace loom {

using json = nlohmann::json;

namespace {

constexpr std::string_view k_format = "loom-job-identity";
constexpr int k_version = 1;

// Dotted keys of job_to_yaml's output that are not part of the identity
// (why: job_identity.h). Sections listed whole end with a dot.
constexpr std::array<std::string_view, 23> k_not_identity = {
    "distribution.",
    "checkpoint_uri",
    "hyperparameters.output_dir",
    "hyperparameters.logging_dir",
    "hyperparameters.overwrite_output_dir",
    "hyperparameters.resume_from_checkpoint",
    "hyperparameters.num_train_epochs",
    "hyperparameters.max_steps",
    "hyperparameters.per_device_train_batch_size",
    "hyperparameters.per_device_eval_batch_size",
    "hyperparameters.use_cpu",
    "hyperparameters.bf16",
    "hyperparameters.fp16",
    "hyperparameters.disable_tqdm",
    "hyperparameters.logging_strategy",
    "hyperparameters.logging_steps",
    "hyperparameters.logging_first_step",
    "hyperparameters.eval_strategy",
    "hyperparameters.eval_steps",
    "hyperparameters.save_strategy",
    "hyperparameters.save_steps",
    "hyperparameters.save_total_limit",
    "peft.merge_adapters",  // what the final folder holds, not what trains
};

// Maps whose order means something (label_map's order numbers the labels):
// kept as one value instead of one key per entry.
constexpr std::string_view k_ordered_maps[] = {"data.label_map"};

// Keys job_to_yaml writes only when set: present (empty) in every identity,
// so setting one shows as a difference instead of a key a newer Loom added.
constexpr std::string_view k_optional[] = {"model.path", "model.weights",
                                           "hyperparameters.lr_scheduler_kwargs.num_cycles"};

bool excluded(const std::string& key) {
    return std::any_of(k_not_identity.begin(), k_not_identity.end(), [&](std::string_view x) {
        return x.ends_with('.') ? key.starts_with(x) : key == x;
    });
}

std::string flow_text(const YAML::Node& node) {
    YAML::Emitter e;
    e << YAML::Flow << node;
    return e.c_str();
}

void flatten(const YAML::Node& node, const std::string& key, json& out) {
    const bool ordered = std::find(std::begin(k_ordered_maps), std::end(k_ordered_maps), key) !=
                         std::end(k_ordered_maps);
    if (node.IsMap() && !ordered) {
        for (const auto& kv : node) {
            const std::string k = kv.first.Scalar();
            flatten(kv.second, key.empty() ? k : key + "." + k, out);
        }
        return;
    }
    if (excluded(key)) return;
    if (node.IsNull())
        out[key] = "";
    else if (node.IsScalar())
        out[key] = node.Scalar();
    else
        out[key] = flow_text(node);
}

std::string shown(const json& v) {
    const std::string s = v.is_string() ? v.get<std::string>() : v.dump();
    return s.empty() ? "(none)" : s;
}

}  // namespace

json job_identity(const Job& job, int64_t data_parallel_size) {
    json fields = json::object();
    flatten(YAML::Load(job_to_yaml(job)), "", fields);
    for (std::string_view k : k_optional)
        if (!fields.contains(std::string(k))) fields[std::string(k)] = "";
    const TrainingArgs& t = job.training;
    fields["hyperparameters.global_train_batch_size"] = std::to_string(
        t.per_device_train_batch_size * t.gradient_accumulation_steps * data_parallel_size);
    return {{"format", std::string(k_format)}, {"version", k_version}, {"fields", fields}};
}

std::vector<std::string> job_identity_differences(const json& saved, const json& current,
                                                  const std::string& source) {
    LOOM_CHECK(saved.is_object() && saved.value("format", "") == k_format &&
                   saved.contains("fields") && saved["fields"].is_object(),
               "{}: not a job identity (expected {{\"format\": \"{}\", \"fields\": {{...}}}})",
               source, k_format);
    const json& a = saved["fields"];
    const json& b = current.at("fields");
    std::vector<std::string> out;
    // A moved model folder changes each file under it: the folder says it once.
    const bool folder_moved =
        a.contains("model.path") && b.contains("model.path") && a["model.path"] != b["model.path"];
    for (auto it = b.begin(); it != b.end(); ++it) {
        if (!a.contains(it.key()) || a[it.key()] == it.value()) continue;
        if (folder_moved && it.key().starts_with("model.") && it.key() != "model.path") continue;
        std::string line = fmt::format("{}: {} (checkpoint) vs {} (this job)", it.key(),
                                       shown(a[it.key()]), shown(it.value()));
        if (it.key() == "hyperparameters.global_train_batch_size")
            line +=
                "; it is per_device_train_batch_size x gradient_accumulation_steps x "
                "data-parallel ranks: on another number of ranks, set "
                "per_device_train_batch_size to keep it";
        out.push_back(std::move(line));
    }
    return out;
}

}  // namespace loom
