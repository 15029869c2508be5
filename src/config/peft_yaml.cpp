// The `peft:` block: a LoRA adapter in PEFT's LoraConfig names. Keys PEFT
// writes that change nothing here (peft_type, task_type) are accepted with a
// note; options Loom lacks are refused with the key's name unless they hold
// PEFT's default (so an adapter_config.json's values can be pasted in).
#include <fmt/format.h>

#include "config/job_sections.h"
#include "config/yaml_reader.h"

namespace loom::config {

namespace {

std::vector<std::string> read_names(const YamlCtx& c, const YAML::Node& n, const std::string& p,
                                    bool allow_null) {
    std::vector<std::string> out;
    if (n.IsNull() && allow_null) return out;
    if (!n.IsSequence())
        c.fail(p, n,
               fmt::format("{}: expected a list of module names (e.g. [q_proj, v_proj]), got {}{}",
                           p, describe(n),
                           n.IsScalar() ? " (PEFT reads a single string as a regular expression, "
                                          "which Loom does not support)"
                                        : ""));
    for (size_t i = 0; i < n.size(); ++i) {
        std::string s = read_string(c, n[i], fmt::format("{}[{}]", p, i));
        if (s.empty()) c.fail(p, n[i], fmt::format("{}[{}]: an empty module name", p, i));
        out.push_back(std::move(s));
    }
    return out;
}

// A PEFT option Loom has only at its default: any other value is refused.
Field only_default_bool(std::string_view name, bool want, std::string_view why) {
    return {name, [want, why](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
                if (read_bool(c, n, p) != want)
                    c.fail(p, n,
                           fmt::format("{}: only {} is supported ({})", p, want ? "true" : "false",
                                       why));
            }};
}

std::vector<Field> peft_fields(PeftArgs& a) {
    auto peft_type = [](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        const std::string v = read_string(c, n, p);
        if (v != "LORA")
            c.fail(p, n, fmt::format("{}: '{}' is not supported (expected LORA)", p, v));
    };
    auto task_type = [](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        const auto v = read_optional_string(c, n, p);
        c.notes.push_back(fmt::format(
            "{}: {} noted; the job's task decides the model's head, not PEFT's task_type", p,
            v.value_or("null")));
    };
    auto bias = [](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        const std::string v = read_string(c, n, p);
        if (v != "none")
            c.fail(p, n,
                   fmt::format("{}: '{}' is not supported (only none: the base biases stay frozen)",
                               p, v));
    };
    return {
        {"peft_type", peft_type},
        {"task_type", task_type},
        field_int("r", &a.r),
        field_number("lora_alpha", &a.lora_alpha),
        field_number("lora_dropout", &a.lora_dropout),
        {"target_modules",
         [&a](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
             a.target_modules = read_names(c, n, p, true);
         }},
        {"modules_to_save",
         [&a](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
             a.modules_to_save = read_names(c, n, p, true);
         }},
        {"bias", bias},
        only_default_bool("use_dora", false, "DoRA is not implemented"),
        only_default_bool("use_rslora", false, "scaling is lora_alpha / r"),
        only_default_bool("fan_in_fan_out", false, "Loom knows each layer's weight layout itself"),
        only_default_bool("init_lora_weights", true,
                          "A kaiming-uniform, B zeros, as PEFT's default"),
        only_default_bool("inference_mode", false, "a training job trains the adapter"),
        field_bool("merge_adapters", &a.merge_adapters)};
}

}  // namespace

std::vector<std::string_view> peft_key_names() {
    PeftArgs a;
    std::vector<std::string_view> out;
    for (const Field& f : peft_fields(a)) out.push_back(f.name);
    return out;
}

void read_peft(const YamlCtx& ctx, const YAML::Node& node, const std::string& path, PeftArgs& out) {
    out = PeftArgs{};
    read_fields(ctx, node, path, peft_fields(out));
    out.enabled = true;
    if (out.r <= 0) ctx.fail_key("peft.r", fmt::format("peft.r: must be > 0, got {}", out.r));
    if (!(out.lora_alpha > 0))
        ctx.fail_key("peft.lora_alpha",
                     fmt::format("peft.lora_alpha: must be > 0, got {}", out.lora_alpha));
    if (!(out.lora_dropout >= 0 && out.lora_dropout < 1))
        ctx.fail_key("peft.lora_dropout",
                     fmt::format("peft.lora_dropout: must be in [0, 1), got {}", out.lora_dropout));
}

void validate_peft(const YamlCtx& ctx, const Job& job) {
    if (!job.peft.enabled) return;
    const DistributionArgs& d = job.distribution;
    if (d.auto_layout)
        ctx.fail_key("distribution",
                     "distribution: auto with a peft: block; the layout search does not plan "
                     "LoRA: give the data, tensor and pipeline parallel degrees (and zero_stage) "
                     "instead");
}

}  // namespace loom::config
