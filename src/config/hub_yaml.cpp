// The push_to_hub keys of `hyperparameters:`, spelled as HF TrainingArguments
// spells them, and the notes they add to the log. What a push does is in
// train/hub_push.h; this file only reads and checks the keys.
#include <fmt/format.h>

#include <algorithm>

#include "config/job.h"
#include "config/job_sections.h"
#include "config/yaml_reader.h"

namespace loom::config {

std::vector<Field> hub_fields(HubArgs& h) {
    auto model_id = [&h](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        h.hub_model_id = read_optional_string(c, n, p).value_or("");
        const std::string& id = h.hub_model_id;
        const bool ok = id.empty() ||
                        (std::count(id.begin(), id.end(), '/') <= 1 && id.front() != '/' &&
                         id.back() != '/' && id.find("..") == std::string::npos &&
                         std::all_of(id.begin(), id.end(), [](char ch) {
                             return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' ||
                                    ch == '_' || ch == '.' || ch == '/';
                         }));
        if (!ok)
            c.fail(p, n,
                   fmt::format("{}: '{}' is not a Hub repo id (expected org/name or name: letters, "
                               "digits, '-', '_', '.')",
                               p, id));
    };
    auto token = [&h](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        h.hub_token = read_optional_string(c, n, p).value_or("");
        // Never echoed: a message about this key must not carry its value.
        if (h.hub_token.find_first_of(" \t\n") != std::string::npos)
            c.fail(p, n, fmt::format("{}: a token has no spaces", p));
    };
    return {field_bool("push_to_hub", &h.push_to_hub),
            {"hub_model_id", model_id},
            field_enum("hub_strategy", &h.hub_strategy),
            {"hub_token", token},
            field_bool("hub_private_repo", &h.hub_private_repo),
            field_bool("hub_always_push", &h.hub_always_push)};
}

std::vector<Field> save_fields(SaveArgs& s) {
    auto shard = [&s](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        s.max_shard_size = read_string(c, n, p);
        // save_pretrained's spellings: a byte count or a number with a unit.
        const std::string& v = s.max_shard_size;
        size_t i = 0;
        while (i < v.size() && (std::isdigit(static_cast<unsigned char>(v[i])) || v[i] == '.')) ++i;
        std::string unit = v.substr(i);
        while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
        static const char* units[] = {"", "B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"};
        const bool ok = i > 0 && std::any_of(std::begin(units), std::end(units),
                                             [&](const char* u) { return unit == u; });
        if (!ok)
            c.fail(p, n,
                   fmt::format("{}: '{}' is not a size (expected e.g. 5GB, 500MB, 2GiB or bytes)", p, v));
    };
    auto dtype = [&s](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        const std::string v = read_string(c, n, p);
        s.export_dtype.reset();
        if (v == "auto") return;
        // torch_dtype's spellings; the weights stay floating point.
        if (v == "float32" || v == "bfloat16" || v == "float16")
            s.export_dtype = dtype_from_name(v);
        else
            c.fail(p, n,
                   fmt::format("{}: '{}' is not an export type (expected auto, float32, bfloat16 "
                               "or float16)",
                               p, v));
    };
    return {field_bool("save_safetensors", &s.save_safetensors),
            {"max_shard_size", shard},
            {"export_dtype", dtype}};
}

std::vector<std::string> hub_notes(const YamlCtx& ctx, const Job& job) {
    const HubArgs& h = job.hub;
    std::vector<std::string> out;
    if (!job.save.save_safetensors)
        out.push_back("note: hyperparameters.save_safetensors is false, and Loom writes only "
                      "safetensors (no pytorch_model.bin): the model is saved as safetensors");
    if (!h.push_to_hub) {
        for (const char* k : {"hub_model_id", "hub_strategy", "hub_token", "hub_private_repo",
                              "hub_always_push"})
            if (ctx.has(std::string("hyperparameters.") + k))
                out.push_back(fmt::format(
                    "note: hyperparameters.{} has no effect: push_to_hub is not set", k));
        return out;
    }
    out.push_back(fmt::format(
        "hub: pushing to {} ({}{}{}), in the background", h.hub_model_id.empty() ? "<output_dir name>" : h.hub_model_id,
        enum_name(h.hub_strategy), h.hub_private_repo ? ", private" : "",
        h.hub_always_push ? ", hub_always_push: a save does not wait for the previous push" : ""));
    if (job.checkpoint.save_strategy == IntervalStrategy::no && h.hub_strategy != HubStrategy::end)
        out.push_back(fmt::format("note: hub_strategy {} pushes at saves, and save_strategy is no: "
                                  "only the end of training pushes",
                                  enum_name(h.hub_strategy)));
    return out;
}

}  // namespace loom::config
