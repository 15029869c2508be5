// Parsing the job file: the top level, `model`, `data`, `hyperparameters`,
// and --set overrides.
//
// Overrides are merged into the YAML tree before any section is read, so a
// value given with --set passes through exactly the validation a value in the
// file does; YamlCtx remembers which dotted paths came from --set so errors
// name the argument instead of a line. The distribution block lives in
// distribution_yaml.cpp, the cross-key checks in job_validate.cpp.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/job.h"
#include "config/job_sections.h"
#include "config/yaml_reader.h"

namespace loom {

namespace fs = std::filesystem;
using config::Field;
using config::YamlCtx;

namespace config {

// "org/name" or "name" that is not a path on this machine: a Hub model id.
// io/hf_hub.h checks the id fully when it is resolved.
bool looks_like_hub_id(const std::string& raw, const std::string& resolved) {
    if (raw.empty() || fs::exists(resolved) || raw.find("://") != std::string::npos) return false;
    if (raw.front() == '.' || raw.front() == '/' || raw.front() == '~') return false;
    return std::count(raw.begin(), raw.end(), '/') <= 1 && raw.back() != '/';
}

void read_model(const YamlCtx& ctx, const YAML::Node& node, ModelArgs& out, bool need_tokenizer) {
    out = ModelArgs{};
    // A name that is not a folder here may be a Hub id: both are kept, and
    // the command resolves the id (cli/hub_model.h) unless the folder exists
    // by then.
    auto folder_or_id = [&](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        const std::string raw = read_optional_string(c, n, p).value_or("");
        out.path = c.resolve_path(p, raw);
        if (looks_like_hub_id(raw, out.path)) out.hub_id = raw;
    };
    if (node.IsScalar()) {
        folder_or_id(ctx, node, "model");
    } else if (node.IsMap()) {
        read_fields(ctx, node, "model",
                    {{"path", folder_or_id}, field_path("config", &out.config_path),
                     field_path("tokenizer", &out.tokenizer_path),
                     field_path("weights", &out.weights_path),
                     field_optional_string("revision", &out.revision)});
    } else {
        ctx.fail("model", node,
                 fmt::format("model: expected a Hugging Face folder path, a Hub model id or a map "
                             "{{config: config.json, tokenizer: tokenizer.json}}, got {}",
                             describe(node)));
    }
    if (!out.revision.empty() && out.hub_id.empty())
        ctx.fail("model", node, "model.revision: only applies to a Hub model id (org/name)");
    // A folder supplies whatever was not named file by file.
    if (!out.path.empty()) {
        if (out.config_path.empty())
            out.config_path = (fs::path(out.path) / "config.json").string();
        if (out.tokenizer_path.empty())
            out.tokenizer_path = (fs::path(out.path) / "tokenizer.json").string();
        if (out.weights_path.empty()) {
            // save_pretrained's sharded form when there is no single file.
            const fs::path single = fs::path(out.path) / "model.safetensors";
            const fs::path index = fs::path(out.path) / "model.safetensors.index.json";
            out.weights_path = (!fs::exists(single) && fs::exists(index)) ? index.string() : single.string();
        }
    }
    if (out.config_path.empty())
        ctx.fail("model", node, "model: needs a folder or a 'config' (config.json) to build from");
    if (out.tokenizer_path.empty() && need_tokenizer)
        ctx.fail("model", node, "model: needs a folder or a 'tokenizer' (tokenizer.json)");
}

std::vector<Field> data_fields(DataArgs& d) {
    auto label_map = [&d](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
        d.label_map.clear();
        if (n.IsNull()) return;
        if (!n.IsMap())
            c.fail(p, n,
                   fmt::format("{}: expected a map of raw label -> label name, got {}", p,
                               describe(n)));
        for (const auto& kv : n) {
            const YAML::Node key_node = kv.first;
            const YAML::Node value = kv.second;
            if (!key_node.IsScalar())
                c.fail(p, key_node,
                       fmt::format("{}: keys must be labels as written in the data", p));
            std::string key = key_node.Scalar();
            for (const auto& [k, v] : d.label_map)
                if (k == key)
                    c.fail(p, key_node, fmt::format("{}: label '{}' is mapped twice", p, key));
            std::string sub = join_path(p, key);
            d.label_map.emplace_back(key, read_string(c, value, sub));
        }
    };
    return {field_path("train", &d.train),
            field_path("eval", &d.eval),
            field_string("text_column", &d.text_column),
            field_optional_string("text_pair_column", &d.text_pair_column),
            field_optional_string("label_column", &d.label_column),
            field_optional_string("prompt_column", &d.prompt_column),
            field_string("completion_column", &d.completion_column),
            {"label_map", label_map},
            field_string("question_column", &d.question_column),
            field_string("context_column", &d.context_column),
            field_string("answers_column", &d.answers_column),
            field_string("id_column", &d.id_column),
            field_int("max_seq_length", &d.max_seq_length),
            field_int("doc_stride", &d.doc_stride),
            field_int("max_answer_length", &d.max_answer_length),
            field_number("mlm_probability", &d.mlm_probability),
            {"pad_to_multiple_of",
             [&d](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
                 d.pad_to_multiple_of = n.IsNull() ? 0 : read_int(c, n, p);
             }},
            field_bool("packing", &d.packing),
            field_bool("pack_boundaries", &d.pack_boundaries),
            field_bool("skip_bad_lines", &d.skip_bad_lines),
            field_enum("sample_by", &d.sample_by)};
}

std::vector<Field> hyperparameter_fields(TrainingArgs& t, CheckpointArgs& c) {
    auto optim = [&t](const YamlCtx& ctx, const YAML::Node& n, const std::string& p) {
        std::string s = read_string(ctx, n, p);
        // HF's AdamW spellings all run the same update here.
        if (s == "adamw_torch" || s == "adamw_hf" || s == "adamw_torch_fused") s = "adamw";
        if (auto e = enum_from_name<OptimizerKind>(s)) {
            t.optim = *e;
            return;
        }
        ctx.fail(p, n,
                 fmt::format("{}: '{}' is not supported (expected adamw, adamw_torch, lamb or sgd)",
                             p, s));
    };
    auto kwargs = [&t](const YamlCtx& ctx, const YAML::Node& n, const std::string& p) {
        double cycles = 0;
        read_fields(ctx, n, p,
                    {field_number("lr_end", &t.lr_end), field_number("power", &t.power),
                     field_number("num_cycles", &cycles)});
        if (ctx.has(join_path(p, "num_cycles"))) t.num_cycles = cycles;
    };
    auto resume = [&c](const YamlCtx& ctx, const YAML::Node& n, const std::string& p) {
        // HF's Trainer.train(resume_from_checkpoint=True) means "the latest".
        c.resume_from_checkpoint.clear();
        if (n.IsNull()) return;
        std::string s = read_string(ctx, n, p);
        if (s == "latest" || s == "true" || s == "True") {
            c.resume_from_checkpoint = "latest";
        } else if (s != "false" && s != "False" && !s.empty()) {
            c.resume_from_checkpoint = ctx.resolve_path(p, s);
        }
    };
    auto steps_or_null = [](double* out) {
        return [out](const YamlCtx& ctx, const YAML::Node& n, const std::string& p) {
            if (!n.IsNull()) *out = read_number(ctx, n, p);
        };
    };
    return {field_path("output_dir", &t.output_dir),
            field_path("logging_dir", &t.logging_dir),
            field_bool("overwrite_output_dir", &t.overwrite_output_dir),
            field_number("num_train_epochs", &t.num_train_epochs),
            field_int("max_steps", &t.max_steps),
            field_int("per_device_train_batch_size", &t.per_device_train_batch_size),
            field_int("per_device_eval_batch_size", &t.per_device_eval_batch_size),
            field_int("gradient_accumulation_steps", &t.gradient_accumulation_steps),
            field_number("learning_rate", &t.learning_rate),
            field_number("weight_decay", &t.weight_decay),
            field_number("adam_beta1", &t.adam_beta1),
            field_number("adam_beta2", &t.adam_beta2),
            field_number("adam_epsilon", &t.adam_epsilon),
            field_number("max_grad_norm", &t.max_grad_norm),
            field_enum("lr_scheduler_type", &t.lr_scheduler_type),
            {"lr_scheduler_kwargs", kwargs},
            field_number("warmup_ratio", &t.warmup_ratio),
            field_int("warmup_steps", &t.warmup_steps),
            {"optim", optim},
            field_int("seed", &t.seed),
            {"data_seed",
             [&t](const YamlCtx& ctx, const YAML::Node& n, const std::string& p) {
                 if (!n.IsNull()) t.data_seed = read_int(ctx, n, p);
             }},
            field_enum("logging_strategy", &t.logging_strategy),
            field_number("logging_steps", &t.logging_steps),
            field_bool("logging_first_step", &t.logging_first_step),
            field_enum("eval_strategy", &t.eval_strategy),
            field_enum("evaluation_strategy", &t.eval_strategy),
            {"eval_steps", steps_or_null(&t.eval_steps)},
            field_bool("load_best_model_at_end", &t.load_best_model_at_end),
            field_optional_string("metric_for_best_model", &t.metric_for_best_model),
            {"greater_is_better",
             [&t](const YamlCtx& ctx, const YAML::Node& n, const std::string& p) {
                 if (!n.IsNull()) t.greater_is_better = read_bool(ctx, n, p);
             }},
            field_int("early_stopping_patience", &t.early_stopping_patience),
            field_number("early_stopping_threshold", &t.early_stopping_threshold),
            field_bool("bf16", &t.bf16),
            field_bool("fp16", &t.fp16),
            field_bool("use_cpu", &t.use_cpu),
            field_bool("dataloader_drop_last", &t.dataloader_drop_last),
            field_bool("disable_tqdm", &t.disable_tqdm),
            // HF names applied or noted after every section is read (job_compat.cpp).
            {"gradient_checkpointing", [](const YamlCtx& ctx, const YAML::Node& n,
                                          const std::string& p) { read_bool(ctx, n, p); }},
            {"report_to", read_report_to},
            {"do_train", [](const YamlCtx& ctx, const YAML::Node& n,
                            const std::string& p) { read_bool(ctx, n, p); }},
            {"do_eval", [](const YamlCtx& ctx, const YAML::Node& n,
                           const std::string& p) { read_bool(ctx, n, p); }},
            field_enum("save_strategy", &c.save_strategy),
            {"save_steps", steps_or_null(&c.save_steps)},
            {"save_total_limit",
             [&c](const YamlCtx& ctx, const YAML::Node& n, const std::string& p) {
                 c.save_total_limit = n.IsNull() ? 0 : read_int(ctx, n, p);
             }},
            {"resume_from_checkpoint", resume}};
}

}  // namespace config

namespace {

// Merges one "a.b.c=value" into the tree, creating maps on the way.
void apply_override(YAML::Node& root, const std::string& arg, YamlCtx& ctx,
                    const std::string& given_label) {
    const std::string label = given_label.empty() ? "--set " + arg : given_label;
    auto eq = arg.find('=');
    LOOM_CHECK(eq != std::string::npos && eq > 0,
               "{}: expected key=value, e.g. --set hyperparameters.learning_rate=3e-5", label);
    const std::string key = arg.substr(0, eq);
    const std::string text = arg.substr(eq + 1);
    std::vector<std::string> parts;
    std::stringstream ss(key);
    for (std::string part; std::getline(ss, part, '.');) {
        LOOM_CHECK(!part.empty(), "{}: empty key segment in '{}'", label, key);
        parts.push_back(part);
    }
    LOOM_CHECK(!parts.empty() && key.back() != '.', "{}: empty key segment in '{}'", label, key);
    YAML::Node value;
    try {
        value = text.empty() ? YAML::Node(YAML::NodeType::Null) : YAML::Load(text);
    } catch (const YAML::Exception& e) {
        LOOM_FAIL("{}: the value is not valid YAML: {}", label, e.msg);
    }
    if (!root.IsMap()) root = YAML::Node(YAML::NodeType::Map);
    YAML::Node cur = root;
    std::string path;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
        path = config::join_path(path, parts[i]);
        if (!cur[parts[i]] || cur[parts[i]].IsNull()) {
            cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
        } else if (!cur[parts[i]].IsMap()) {
            LOOM_FAIL("{}: '{}' is {} in {}, not a map, so it has no key '{}'", label, path,
                      config::describe(cur[parts[i]]), ctx.where(path, cur[parts[i]]),
                      parts[i + 1]);
        }
        YAML::Node next = cur[parts[i]];
        cur.reset(next);
    }
    cur[parts.back()] = value;
    ctx.overrides[key] = label;
}

std::vector<std::string_view> field_names(const std::vector<Field>& fields) {
    std::vector<std::string_view> out;
    for (const auto& f : fields) out.push_back(f.name);
    return out;
}

const std::vector<std::string_view> k_top_level_keys = {"model",
                                                        "task",
                                                        "data",
                                                        "hyperparameters",
                                                        "distribution",
                                                        "checkpoint_uri",
                                                        "checkpoint_s3_uri",
                                                        "peft"};

}  // namespace

namespace config {

void register_key_homes(YamlCtx& ctx) {
    DataArgs d;
    TrainingArgs t;
    CheckpointArgs c;
    for (auto k : k_top_level_keys) ctx.key_homes.emplace(std::string(k), "");
    for (auto k : field_names(data_fields(d))) ctx.key_homes.emplace(std::string(k), "data");
    HubArgs h;
    for (auto k : field_names(hyperparameter_fields(t, c)))
        ctx.key_homes.emplace(std::string(k), "hyperparameters");
    for (auto k : field_names(hub_fields(h))) ctx.key_homes.emplace(std::string(k), "hyperparameters");
    SaveArgs sv;
    for (auto k : field_names(save_fields(sv))) ctx.key_homes.emplace(std::string(k), "hyperparameters");
    for (auto k : distribution_key_names()) ctx.key_homes.emplace(std::string(k), "distribution");
    for (auto k : peft_key_names()) ctx.key_homes.emplace(std::string(k), "peft");
}

}  // namespace config

std::string job_key_path(const std::string& key) {
    if (key.find('.') != std::string::npos) return key;
    YamlCtx ctx;
    config::register_key_homes(ctx);
    auto it = ctx.key_homes.find(key);
    if (it == ctx.key_homes.end() || it->second.empty()) return key;
    return config::join_path(it->second, key);
}

Job job_parse(const std::string& yaml_text, const std::string& source_name,
              const std::string& base_dir, const std::vector<std::string>& overrides,
              const JobParseOptions& options) {
    YamlCtx ctx;
    ctx.file = source_name;
    ctx.base_dir = base_dir;
    ctx.override_base_dir = options.override_base_dir;
    config::register_key_homes(ctx);

    YAML::Node root;
    try {
        root = YAML::Load(yaml_text);
    } catch (const YAML::Exception& e) {
        LOOM_FAIL("{}:{}:{}: YAML syntax error: {}", source_name, e.mark.line + 1,
                  e.mark.column + 1, e.msg);
    }
    if (root.IsDefined() && !root.IsNull() && !root.IsMap())
        LOOM_FAIL(
            "{}: a job file must be a map of keys (model, task, data, hyperparameters, "
            "distribution), got {}",
            source_name, config::describe(root));
    for (size_t i = 0; i < overrides.size(); ++i)
        apply_override(root, overrides[i], ctx,
                       i < options.override_labels.size() ? options.override_labels[i] : "");
    if (!root.IsMap() || root.size() == 0)
        LOOM_FAIL("{}: the job is empty; it needs at least 'model', 'task' and 'data'",
                  source_name);

    Job job;
    job.source = source_name;
    YAML::Node model_node, distribution_node;
    config::read_fields(
        ctx, root, "",
        {{"model",
          [&](const YamlCtx&, const YAML::Node& n, const std::string&) { model_node = n; }},
         config::field_enum("task", &job.task),
         {"data",
          [&](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
              config::read_fields(c, n, p, config::data_fields(job.data));
          }},
         {"hyperparameters",
          [&](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
              auto fields = config::hyperparameter_fields(job.training, job.checkpoint);
              for (auto& f : config::hub_fields(job.hub)) fields.push_back(std::move(f));
              for (auto& f : config::save_fields(job.save)) fields.push_back(std::move(f));
              config::read_fields(c, n, p, fields);
          }},
         {"distribution",
          [&](const YamlCtx&, const YAML::Node& n, const std::string&) { distribution_node = n; }},
         {"peft", [&](const YamlCtx& c, const YAML::Node& n,
                      const std::string& p) { config::read_peft(c, n, p, job.peft); }},
         config::field_optional_string("checkpoint_uri", &job.checkpoint.checkpoint_uri),
         {"checkpoint_s3_uri", [](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
              config::read_optional_string(c, n, p);
          }}});

    if (!ctx.has("model"))
        LOOM_FAIL(
            "{}: missing required key 'model' (a Hugging Face folder, or {{config, "
            "tokenizer}} to pretrain from scratch)",
            source_name);
    if (!ctx.has("task"))
        LOOM_FAIL(
            "{}: missing required key 'task' (one of: masked-lm, sequence-classification, "
            "question-answering, causal-lm)",
            source_name);
    config::read_model(ctx, model_node, job.model, !options.model_config_only);
    config::apply_top_level_synonyms(ctx, job);
    config::apply_gradient_checkpointing(ctx, job.distribution);
    if (distribution_node.IsDefined())
        config::read_distribution(ctx, distribution_node, job.distribution, job.training);
    config::check_gradient_checkpointing(ctx, job.distribution);
    config::resolve_and_validate(ctx, job, options);
    job.notes = ctx.notes;
    for (const auto& [path, key] : ctx.seen_keys) job.locations[path] = ctx.where(path, key);
    return job;
}

Job job_load(const std::string& path, const std::vector<std::string>& overrides,
             const JobParseOptions& options) {
    std::ifstream in(path, std::ios::binary);
    LOOM_CHECK(in.good(), "job file '{}' could not be opened", path);
    std::stringstream buf;
    buf << in.rdbuf();
    fs::path abs = fs::absolute(path);
    return job_parse(buf.str(), path, abs.parent_path().string(), overrides, options);
}

}  // namespace loom
