// TrainState: everything besides tensors that a resumed run needs to continue
// exactly where the interrupted one stopped, stored as trainer_state.json in
// each checkpoint (HF's TrainerState names where HF has one, plus a "loom"
// block for the data position and the seeds).
//
// Invariant: randomness in Loom is counter-based (dropout keyed by seed, step
// and global sample; masks and shuffles by data_seed, epoch and sample), so
// the seeds plus (global_step, loader position) ARE the RNG state; there is no
// generator state to save.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom {

struct TrainState {
    int64_t global_step = 0;     // optimizer updates done
    double epoch = 0.0;          // fractional epochs done (HF's state.epoch)
    int64_t loader_epoch = 0;    // data position: epoch being read
    int64_t loader_batches = 0;  // global batches of that epoch already consumed
    uint64_t seed = 42;          // dropout / init seed
    uint64_t data_seed = 42;     // shuffle / masking seed
    int64_t total_steps = 0;     // the plan the run was started with
    int64_t samples_seen = 0;
    int64_t tokens_seen = 0;  // real (non-padding) input tokens
    std::optional<double> best_metric;
    std::string best_model_checkpoint;  // folder name (checkpoint-<step>) or ""
    int64_t patience_counter = 0;       // early stopping: evaluations without improvement
    // fp16 dynamic loss scaling (optim/loss_scale.h); unused otherwise.
    double loss_scale = 0.0;  // 0: no scaler state saved
    int64_t loss_scale_growth_tracker = 0;
    int64_t skipped_steps = 0;  // fp16 steps skipped for inf/NaN gradients
    // The last evaluation's metrics ("eval_loss", ...), for best-model selection at save.
    nlohmann::json last_eval = nlohmann::json::object();
    nlohmann::json log_history = nlohmann::json::array();  // HF log_history entries
};

nlohmann::json train_state_to_json(const TrainState& s);
// `source` names the file in errors; every required field is checked.
TrainState train_state_from_json(const nlohmann::json& j, const std::string& source);

}  // namespace loom
