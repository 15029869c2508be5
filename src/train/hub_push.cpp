// Background pushes to the Hub at saves and at the end; see hub_push.h.
#include "train/hub_push.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/check.h"
#include "core/cpu_bind.h"

namespace loom {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The files of a model folder the Hub repo's root holds (as save_pretrained
// writes them); checkpoints' optimizer and scheduler state stay out.
bool is_model_file(const std::string& name) {
    static const char* k_names[] = {"model.safetensors",     "model.safetensors.index.json",
                                    "config.json",           "generation_config.json",
                                    "tokenizer.json",        "tokenizer_config.json",
                                    "special_tokens_map.json", "vocab.txt",
                                    "vocab.json",            "merges.txt",
                                    "added_tokens.json"};
    for (const char* n : k_names)
        if (name == n) return true;
    return name.starts_with("model-") && name.ends_with(".safetensors");  // shards
}

double env_number(const char* name, double fallback) {
    const char* v = std::getenv(name);
    if (!v || !*v) return fallback;
    char* end = nullptr;
    const double d = std::strtod(v, &end);
    LOOM_CHECK(end && *end == '\0' && d >= 0, "environment variable {}='{}' is not a number >= 0",
               name, v);
    return d;
}

// A hard link where the file system allows it (instant, and the content
// survives the checkpoint's deletion), else a copy.
void link_or_copy(const fs::path& from, const fs::path& to) {
    fs::create_directories(to.parent_path());
    std::error_code ec;
    fs::create_hard_link(from, to, ec);
    if (ec) fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

std::string fmt_value(double v) { return fmt::format("{:.4g}", v); }

// The eval_* values a card shows (not the timings).
bool is_card_metric(const std::string& key, const json& value) {
    return key.starts_with("eval_") && value.is_number() && !key.ends_with("_per_second") &&
           key != "eval_runtime";
}

// The log_history's evaluations, each with the train loss logged last before
// it (-1: none yet).
struct CardEvals {
    std::vector<json> evals;
    std::vector<double> train_loss;
};

CardEvals card_evals(const json& history) {
    CardEvals ce;
    double train_loss = -1;
    for (const auto& e : history) {
        if (e.contains("loss")) train_loss = e["loss"].get<double>();
        bool is_eval = false;
        for (auto it = e.begin(); it != e.end(); ++it)
            if (it.key().starts_with("eval_") && it.value().is_number()) is_eval = true;
        if (is_eval) {
            ce.evals.push_back(e);
            ce.train_loss.push_back(train_loss);
        }
    }
    return ce;
}

std::string hyperparameters_section(const TrainingArgs& t) {
    std::string card = "\n## Training procedure\n\n### Training hyperparameters\n\n"
                       "The following hyperparameters were used during training:\n";
    card += fmt::format("- learning_rate: {}\n- train_batch_size: {}\n- eval_batch_size: {}\n"
                        "- seed: {}\n- gradient_accumulation_steps: {}\n- optimizer: {} "
                        "(betas=({}, {}), epsilon={})\n- lr_scheduler_type: {}\n",
                        t.learning_rate, t.per_device_train_batch_size, t.per_device_eval_batch_size,
                        t.seed, t.gradient_accumulation_steps, enum_name(t.optim), t.adam_beta1,
                        t.adam_beta2, t.adam_epsilon, enum_name(t.lr_scheduler_type));
    if (t.max_steps > 0)
        card += fmt::format("- training_steps: {}\n", t.max_steps);
    else
        card += fmt::format("- num_epochs: {}\n", t.num_train_epochs);
    return card;
}

// One row per evaluation, the columns of the last one ("" without evaluations).
std::string results_table(const CardEvals& ce) {
    if (ce.evals.empty()) return "";
    std::vector<std::string> cols;
    for (auto it = ce.evals.back().begin(); it != ce.evals.back().end(); ++it)
        if (is_card_metric(it.key(), it.value())) cols.push_back(it.key());
    std::string card = "\n### Training results\n\n| Training Loss | Epoch | Step |";
    for (const auto& c : cols) card += fmt::format(" {} |", c.substr(5));
    card += "\n|:---:|:---:|:---:|";
    for (size_t i = 0; i < cols.size(); ++i) card += ":---:|";
    card += "\n";
    for (size_t r = 0; r < ce.evals.size(); ++r) {
        const json& e = ce.evals[r];
        card += fmt::format("| {} | {} | {} |",
                            ce.train_loss[r] < 0 ? "No log" : fmt_value(ce.train_loss[r]),
                            fmt_value(e.value("epoch", 0.0)), e.value("step", int64_t(0)));
        for (const auto& c : cols)
            card += e.contains(c) && e[c].is_number() ? fmt::format(" {} |", fmt_value(e[c].get<double>()))
                                                      : std::string(" - |");
        card += "\n";
    }
    return card;
}

}  // namespace

HubPusher::HubPusher(const Job& job) : job_(job) {
    const HubArgs& h = job.hub;
    repo_ = h.hub_model_id.empty() ? fs::path(job.training.output_dir).filename().string()
                                   : h.hub_model_id;
    LOOM_CHECK(hub_is_repo_id(repo_),
               "hyperparameters.hub_model_id: '{}' is not a Hub repo id (set hub_model_id: org/name)",
               repo_);
    settings_ = HubSettings::from_environment(h.hub_token, "hyperparameters.hub_token");
    LOOM_CHECK(!settings_.offline, "push_to_hub is set, and HF_HUB_OFFLINE forbids the network");
}

HubPusher::~HubPusher() {
    for (auto& f : all_)
        if (f.valid()) f.wait();
}

std::string HubPusher::model_card(const Job& job, const std::string& repo_id,
                                  const std::string& model_dir) {
    json state = json::object();
    if (std::ifstream in(fs::path(model_dir) / "trainer_state.json"); in) {
        try {
            state = json::parse(in);
        } catch (const std::exception&) {
            state = json::object();
        }
    }
    const json history = state.value("log_history", json::array());
    const std::string base = !job.model.hub_id.empty() ? job.model.hub_id
                             : !job.model.path.empty() ? fs::path(job.model.path).filename().string()
                                                       : "";
    const std::string data = job.data.train.empty() ? "unknown data"
                                                    : fs::path(job.data.train).filename().string();
    std::string name = repo_id.substr(repo_id.find('/') + 1);
    std::string card = "---\nlibrary_name: loom\ntags:\n- generated_from_trainer\n";
    if (!base.empty()) card += fmt::format("base_model: {}\n", base);
    card += fmt::format("model-index:\n- name: {}\n  results: []\n---\n\n", name);
    card += fmt::format("# {}\n\n", name);
    card += base.empty() ? "This model was trained from scratch"
                         : fmt::format("This model is a fine-tuned version of [{}](https://huggingface.co/{})",
                                       base, base);
    card += fmt::format(" on {} ({}).\n", data, enum_name(job.task));

    const CardEvals ce = card_evals(history);
    if (!ce.evals.empty()) {
        const json& last_eval = ce.evals.back();
        card += "It achieves the following results on the evaluation set:\n";
        for (auto it = last_eval.begin(); it != last_eval.end(); ++it)
            if (is_card_metric(it.key(), it.value()))
                card += fmt::format("- {}: {}\n", it.key().substr(5), fmt_value(it.value().get<double>()));
    }
    card += hyperparameters_section(job.training);
    card += results_table(ce);
    card += "\n### Framework versions\n\n- Loom 0.1.0\n";
    return card;
}

std::string HubPusher::stage(const std::string& model_dir, const std::string& checkpoint_dir,
                             int64_t step) {
    static int seq = 0;
    const fs::path out = job_.training.output_dir;
    const fs::path staged = out / ".hub-staging" / fmt::format("{}-step-{}", ++seq, step);
    fs::remove_all(staged);
    fs::create_directories(staged);
    for (const auto& e : fs::directory_iterator(model_dir))
        if (e.is_regular_file() && is_model_file(e.path().filename().string()))
            link_or_copy(e.path(), staged / e.path().filename());
    // TensorBoard event files grow while training runs: a copy is a
    // consistent snapshot of what was logged up to this save.
    const fs::path runs = job_.training.logging_dir.empty() ? out / "runs" : fs::path(job_.training.logging_dir);
    if (fs::is_directory(runs))
        for (const auto& e : fs::recursive_directory_iterator(runs))
            if (e.is_regular_file()) {
                const fs::path to = staged / "runs" / fs::relative(e.path(), runs);
                fs::create_directories(to.parent_path());
                fs::copy_file(e.path(), to, fs::copy_options::overwrite_existing);
            }
    if (!checkpoint_dir.empty() && (job_.hub.hub_strategy == HubStrategy::checkpoint ||
                                    job_.hub.hub_strategy == HubStrategy::all_checkpoints)) {
        const std::string prefix = job_.hub.hub_strategy == HubStrategy::checkpoint
                                       ? std::string("last-checkpoint")
                                       : fs::path(checkpoint_dir).filename().string();
        for (const auto& e : fs::recursive_directory_iterator(checkpoint_dir))
            if (e.is_regular_file())
                link_or_copy(e.path(), staged / prefix / fs::relative(e.path(), checkpoint_dir));
    }
    std::ofstream(staged / "README.md") << model_card(job_, repo_, model_dir);
    return staged.string();
}

void HubPusher::push_staged(const std::string& staged, const std::string& title) {
    const int attempts = std::max(1, int(env_number("LOOM_HUB_PUSH_ATTEMPTS", 3)));
    double delay = env_number("LOOM_HUB_PUSH_RETRY_S", 5);
    std::string last_error;
    for (int i = 1; i <= attempts; ++i) {
        try {
            {
                std::lock_guard<std::mutex> g(mu_);
                if (!repo_created_) {
                    hub_create_repo(repo_, job_.hub.hub_private_repo, settings_);
                    repo_created_ = true;
                }
            }
            const auto files = hub_folder_files(staged);
            const HubCommitResult r = hub_commit_files(repo_, files, title, settings_);
            fmt::print(stderr, "hub: pushed \"{}\" to {} ({} files, commit {})\n", title, repo_,
                       files.size(), r.commit.substr(0, 12));
            std::error_code ec;
            fs::remove_all(staged, ec);
            return;
        } catch (const std::exception& e) {
            last_error = e.what();
            if (i < attempts) {
                fmt::print(stderr, "hub: push \"{}\" to {} failed (attempt {} of {}), retrying in {:.0f} s: {}\n",
                           title, repo_, i, attempts, delay, last_error);
                std::this_thread::sleep_for(std::chrono::duration<double>(delay));
                delay *= 2;
            }
        }
    }
    fmt::print(stderr,
               "hub: warning: push \"{}\" to {} failed after {} attempts, training goes on and the "
               "next push uploads the model again: {}\n",
               title, repo_, attempts, last_error);
    std::error_code ec;
    fs::remove_all(staged, ec);
}

void HubPusher::schedule(const std::string& staged, const std::string& title) {
    std::shared_future<void> prev = job_.hub.hub_always_push ? std::shared_future<void>() : last_;
    last_ = std::async(std::launch::async, [this, prev, staged, title] {
                cpu_unbind_this_thread();
                if (prev.valid()) prev.wait();
                push_staged(staged, title);
            }).share();
    all_.push_back(last_);
}

void HubPusher::after_save(const std::string& checkpoint_dir, int64_t step) {
    if (job_.hub.hub_strategy == HubStrategy::end || checkpoint_dir.empty()) return;
    try {
        schedule(stage(checkpoint_dir, checkpoint_dir, step),
                 fmt::format("Training in progress, step {}", step));
    } catch (const std::exception& e) {
        fmt::print(stderr, "hub: warning: could not prepare the push of step {}: {}\n", step, e.what());
    }
}

void HubPusher::at_end() {
    for (auto& f : all_)
        if (f.valid()) f.wait();
    all_.clear();
    last_ = {};
    try {
        push_staged(stage(job_.training.output_dir, "", -1), "End of training");
    } catch (const std::exception& e) {
        fmt::print(stderr, "hub: warning: could not prepare the final push: {}\n", e.what());
    }
    std::error_code ec;
    fs::remove(fs::path(job_.training.output_dir) / ".hub-staging", ec);
}

}  // namespace loom
