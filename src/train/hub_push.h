// push_to_hub as the Hugging Face Trainer does it: at saves (hub_strategy
// every_save, checkpoint, all_checkpoints) and at the end, the model folder,
// a model card (README.md) and the TensorBoard runs/ go to the Hub repo as
// one commit each (io/hf_hub.h).
//
// What a push holds: the model files of the save (weights, config, tokenizer
// files) at the repo root, runs/, README.md; with hub_strategy checkpoint
// also the whole checkpoint as last-checkpoint/, with all_checkpoints as
// checkpoint-<step>/.
//
// Invariants:
//   - Training never waits for the network and never stops because of it:
//     pushes run on background threads; a failed push is retried
//     (LOOM_HUB_PUSH_ATTEMPTS, default 3; LOOM_HUB_PUSH_RETRY_S apart,
//     default 5, doubling), then a warning is printed and training goes on.
//   - A push never loses its checkpoint: its files are hard-linked (or
//     copied) into <output_dir>/.hub-staging/ when the save happens, so
//     save_total_limit may delete the checkpoint while the upload runs.
//   - Pushes land in save order: each waits for the previous one, unless
//     hub_always_push, where each starts at once.
//
// Not here: parsing the keys (config/hub_yaml.cpp); runs on the main rank only.
#pragma once

#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "config/job.h"
#include "io/hf_hub.h"

namespace loom {

class HubPusher {
public:
    explicit HubPusher(const Job& job);
    ~HubPusher();  // waits for pushes in flight
    HubPusher(const HubPusher&) = delete;
    HubPusher& operator=(const HubPusher&) = delete;

    const std::string& repo_id() const { return repo_; }

    // A checkpoint was written to `checkpoint_dir` (<output_dir>/checkpoint-<step>):
    // schedules its push when hub_strategy pushes at saves.
    void after_save(const std::string& checkpoint_dir, int64_t step);
    // The final model is in output_dir: waits for the pushes in flight, then
    // pushes the final folder ("End of training") and returns. Failures warn.
    void at_end();

    // The README.md model card for the folder `model_dir` (its
    // trainer_state.json gives the metrics), as the Trainer writes it.
    static std::string model_card(const Job& job, const std::string& repo_id,
                                  const std::string& model_dir);

private:
    // Hard-links/copies what a push uploads into a staging folder; returns it.
    std::string stage(const std::string& model_dir, const std::string& checkpoint_dir,
                      int64_t step);
    void push_staged(const std::string& staged, const std::string& title);
    void schedule(const std::string& staged, const std::string& title);

    Job job_;
    std::string repo_;
    HubSettings settings_;
    std::mutex mu_;
    std::shared_future<void> last_;
    std::vector<std::shared_future<void>> all_;
    bool repo_created_ = false;
};

}  // namespace loom
