// Reads SageMaker's training-container contract (see sagemaker_env.h).
#include "cli/sagemaker_env.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "config/job.h"
#include "core/check.h"

namespace loom::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string env_or(const char* name, const std::string& fallback) {
    const char* v = std::getenv(name);
    return v && *v ? std::string(v) : fallback;
}

// A JSON file of the contract, or null when it is absent.
json read_json_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) return nullptr;
    try {
        return json::parse(in);
    } catch (const json::exception& e) {
        LOOM_FAIL("{}: not valid JSON: {}", path, e.what());
    }
}

json parse_env_json(const char* name) {
    const char* v = std::getenv(name);
    if (!v || !*v) return nullptr;
    try {
        return json::parse(v);
    } catch (const json::exception& e) {
        LOOM_FAIL("{}: not valid JSON: {}", name, e.what());
    }
}

// The YAML text of one hyperparameter: JSON is YAML's flow syntax, so a
// decoded value is written back as JSON; a value that was not JSON-encoded
// goes through as written.
std::string yaml_text(const json& v) {
    if (v.is_string()) {
        json decoded;
        try {
            decoded = json::parse(v.get<std::string>());
        } catch (const json::exception&) {
            return v.get<std::string>();
        }
        return decoded.dump();
    }
    return v.dump();
}

// SageMaker's names for the estimator's `distribution` argument.
const std::map<std::string, std::string>& k_sagemaker_keys() {
    static const std::map<std::string, std::string> keys = {
        {"sagemaker_mpi_enabled", "distribution.mpi.enabled"},
        {"sagemaker_mpi_num_of_processes_per_host", "distribution.mpi.processes_per_host"},
        {"sagemaker_mpi_custom_mpi_options", "distribution.mpi.custom_mpi_options"},
        {"sagemaker_distributed_dataparallel_enabled",
         "distribution.smdistributed.dataparallel.enabled"},
        {"sagemaker_distributed_dataparallel_custom_mpi_options",
         "distribution.smdistributed.dataparallel.custom_mpi_options"},
        {"mp_parameters", "distribution.smdistributed.modelparallel.parameters"},
    };
    return keys;
}

bool is_train_channel(const std::string& c) {
    return c == "train" || c == "training" || c == "train_data";
}
bool is_eval_channel(const std::string& c) {
    return c == "eval" || c == "evaluation" || c == "validation" || c == "valid" || c == "test" ||
           c == "dev";
}

}  // namespace

bool started_as_sagemaker_train(int argc, char** argv) {
    if (argc != 2 || std::string(argv[1]) != "train") return false;
    const std::string root = env_or("LOOM_SAGEMAKER_ROOT", "/opt/ml");
    return fs::exists(root + "/input/config/hyperparameters.json");
}

SageMakerEnv read_sagemaker_env() {
    SageMakerEnv e;
    e.root = env_or("LOOM_SAGEMAKER_ROOT", "/opt/ml");
    const std::string config = e.root + "/input/config";
    e.code_dir = e.root + "/code";
    e.model_dir = env_or("SM_MODEL_DIR", e.root + "/model");
    e.output_data_dir = env_or("SM_OUTPUT_DATA_DIR", e.root + "/output/data");
    e.checkpoint_dir = e.root + "/checkpoints";
    e.failure_file = e.root + "/output/failure";

    // Hosts: the variables win over resourceconfig.json.
    const json resource = read_json_file(config + "/resourceconfig.json");
    json hosts = parse_env_json("SM_HOSTS");
    if (hosts.is_null() && resource.is_object() && resource.contains("hosts")) hosts = resource["hosts"];
    if (!hosts.is_null()) {
        LOOM_CHECK(hosts.is_array(), "SM_HOSTS / resourceconfig.json hosts: expected a list of host "
                                     "names, got {}", hosts.dump());
        for (const auto& h : hosts) e.hosts.push_back(h.get<std::string>());
    }
    std::sort(e.hosts.begin(), e.hosts.end());
    e.current_host = env_or("SM_CURRENT_HOST", resource.is_object() && resource.contains("current_host")
                                                   ? resource["current_host"].get<std::string>()
                                                   : std::string());
    if (!e.hosts.empty())
        LOOM_CHECK(std::find(e.hosts.begin(), e.hosts.end(), e.current_host) != e.hosts.end(),
                   "SM_CURRENT_HOST / resourceconfig.json current_host '{}' is not one of the hosts "
                   "({})",
                   e.current_host, fmt::join(e.hosts, ", "));
    e.num_gpus = std::atoi(env_or("SM_NUM_GPUS", "0").c_str());

    // Channels: SM_CHANNEL_<NAME>, else the folders inputdataconfig.json names.
    std::map<std::string, std::string> channels;
    const json data_config = read_json_file(config + "/inputdataconfig.json");
    if (data_config.is_object())
        for (const auto& [name, spec] : data_config.items())
            channels[name] = e.root + "/input/data/" + name;
    for (char** env = environ; *env; ++env) {
        const std::string kv = *env;
        if (kv.rfind("SM_CHANNEL_", 0) != 0) continue;
        const auto eq = kv.find('=');
        std::string name = kv.substr(11, eq - 11);
        std::transform(name.begin(), name.end(), name.begin(), ::tolower);
        channels[name] = kv.substr(eq + 1);
    }
    e.channels.assign(channels.begin(), channels.end());

    // Hyperparameters: the file holds JSON-encoded strings; SM_HPS the
    // decoded values.
    const std::string hp_file = config + "/hyperparameters.json";
    json hps = read_json_file(hp_file);
    std::string hp_source = hp_file;
    bool encoded = true;
    if (hps.is_null()) {
        hps = parse_env_json("SM_HPS");
        hp_source = "SM_HPS";
        encoded = false;
    }
    if (hps.is_null()) hps = json::object();
    LOOM_CHECK(hps.is_object(), "{}: expected a JSON object of hyperparameters, got {}", hp_source,
               hps.dump());
    bool smp = false;
    std::vector<std::string> sdk_keys;
    for (const auto& [key, value] : hps.items()) {
        const std::string text = encoded ? yaml_text(value) : value.dump();
        const std::string label = fmt::format("{}: \"{}\"", hp_source, key);
        if (key == "job") {
            std::string job = text;
            try {
                job = json::parse(text).get<std::string>();
            } catch (const json::exception&) {
            }
            e.base_job = fs::path(job).is_absolute() ? job : e.code_dir + "/" + job;
            LOOM_CHECK(fs::is_regular_file(e.base_job),
                       "{}: the job file '{}' does not exist (looked for {}; `job` is relative to "
                       "the code folder {})",
                       label, job, e.base_job, e.code_dir);
            continue;
        }
        auto sm = k_sagemaker_keys().find(key);
        if (sm != k_sagemaker_keys().end()) {
            e.overrides.push_back(sm->second + "=" + text);
            e.labels.push_back(label);
            if (key == "mp_parameters") smp = true;
            continue;
        }
        if (key.rfind("sagemaker_", 0) == 0) {
            sdk_keys.push_back(key);
            continue;
        }
        e.overrides.push_back(job_key_path(key) + "=" + text);
        e.labels.push_back(label);
    }
    if (!sdk_keys.empty())
        e.notes.push_back(fmt::format(
            "{}: {}: set by the SageMaker SDK for its own training toolkit (script, source "
            "folder, region, log level, instance type); Loom is the entry point itself, so "
            "nothing here uses them",
            hp_source, fmt::join(sdk_keys, ", ")));
    if (smp) {
        e.overrides.push_back("distribution.smdistributed.modelparallel.enabled=true");
        e.labels.push_back(hp_source + ": \"mp_parameters\"");
    }

    for (const auto& [name, dir] : e.channels) {
        const std::string src =
            std::getenv(("SM_CHANNEL_" + [](std::string s) {
                            std::transform(s.begin(), s.end(), s.begin(), ::toupper);
                            return s;
                        }(name)).c_str())
                ? "SM_CHANNEL_" + name
                : config + "/inputdataconfig.json";
        const std::string label = fmt::format("SageMaker channel '{}' ({})", name, src);
        if (is_train_channel(name)) {
            e.overrides.push_back("data.train=" + json(dir).dump());
            e.labels.push_back(label);
        } else if (is_eval_channel(name)) {
            e.overrides.push_back("data.eval=" + json(dir).dump());
            e.labels.push_back(label);
        } else {
            e.notes.push_back(fmt::format(
                "{}: not read; channels named train/training become data.train and "
                "eval/evaluation/validation/test data.eval",
                label));
        }
    }
    e.overrides.push_back("hyperparameters.output_dir=" + json(e.checkpoint_dir).dump());
    e.labels.push_back("SageMaker's checkpoint folder");
    return e;
}

}  // namespace loom::cli
