// What a SageMaker training job hands its container, read into one value:
// the /opt/ml tree (input/config/{hyperparameters,resourceconfig,
// inputdataconfig}.json, input/data/<channel>, model, output, checkpoints)
// and the SM_* variables that SageMaker's training toolkit sets (SM_HPS,
// SM_CHANNEL_<NAME>, SM_MODEL_DIR, SM_OUTPUT_DATA_DIR, SM_HOSTS,
// SM_CURRENT_HOST, SM_NUM_GPUS). A variable, when set, wins over the file;
// a container without the toolkit gets the files only.
//
// Hyperparameters arrive as SageMaker passes them: every value a JSON text
// ("3", "\"bert\"", "true"); a value that is not JSON (written by hand through
// the API) is kept as written. They are turned into job overrides here:
// `job` names the base job file (relative to the code folder), sagemaker_*
// keys become the distribution block the estimator's `distribution`
// argument stands for, and every other key is a job key (top-level, dotted,
// or a bare TrainingArguments / data name), validated later exactly as in a
// job file. Reads files and the environment only; starts nothing.
#pragma once

#include <string>
#include <vector>

namespace loom::cli {

struct SageMakerEnv {
    std::string root = "/opt/ml";  // LOOM_SAGEMAKER_ROOT overrides (tests)
    std::string code_dir;          // <root>/code: where `job` is looked up
    std::string model_dir;         // SM_MODEL_DIR or <root>/model
    std::string output_data_dir;   // SM_OUTPUT_DATA_DIR or <root>/output/data
    std::string checkpoint_dir;    // <root>/checkpoints (synced to checkpoint_s3_uri)
    std::string failure_file;      // <root>/output/failure
    std::vector<std::string> hosts;  // SM_HOSTS or resourceconfig.json, sorted
    std::string current_host;        // SM_CURRENT_HOST or resourceconfig.json
    int num_gpus = 0;                // SM_NUM_GPUS (0 when unset)
    // Channel name -> folder: SM_CHANNEL_<NAME>, or inputdataconfig.json's
    // channels under <root>/input/data.
    std::vector<std::pair<std::string, std::string>> channels;

    std::string base_job;  // the `job` hyperparameter resolved against code_dir; "" = none
    std::vector<std::string> overrides;  // "dotted.key=value" for the job parser
    std::vector<std::string> labels;     // how errors name each override
    std::vector<std::string> notes;      // keys read but meaning nothing here, with why
    int processes_per_host = 0;          // from sagemaker_mpi_num_of_processes_per_host
    bool mpi_enabled = false;            // sagemaker_mpi_enabled
    bool smddp = false;                  // sagemaker_distributed_dataparallel_enabled
    std::string custom_mpi_options;

    const std::string& leader() const { return hosts.front(); }
    bool is_leader() const { return hosts.empty() || current_host == hosts.front(); }
};

// Whether this process is a SageMaker container's `train` with Loom as the
// image's entry point: `loom train` without a job file while
// <root>/input/config/hyperparameters.json exists. main() then runs
// `loom sagemaker train`.
bool started_as_sagemaker_train(int argc, char** argv);

// Reads the contract from LOOM_SAGEMAKER_ROOT (default /opt/ml) and the
// environment; throws loom::Error naming the file or variable on bad input.
SageMakerEnv read_sagemaker_env();

}  // namespace loom::cli
