// trainer_state.json <-> TrainState.
#include "train/train_state.h"

#include "core/check.h"

namespace loom {

using json = nlohmann::json;

json train_state_to_json(const TrainState& s) {
    json j = {{"global_step", s.global_step},
              {"epoch", s.epoch},
              {"max_steps", s.total_steps},
              {"best_metric", s.best_metric ? json(*s.best_metric) : json(nullptr)},
              {"best_model_checkpoint",
               s.best_model_checkpoint.empty() ? json(nullptr) : json(s.best_model_checkpoint)},
              {"num_input_tokens_seen", s.tokens_seen},
              {"log_history", s.log_history}};
    j["loom"] = {{"loader", {{"epoch", s.loader_epoch}, {"batches", s.loader_batches}}},
                 {"seed", s.seed},
                 {"data_seed", s.data_seed},
                 {"samples_seen", s.samples_seen},
                 {"patience_counter", s.patience_counter},
                 {"last_eval", s.last_eval}};
    if (s.loss_scale > 0)
        j["loom"]["loss_scale"] = {{"scale", s.loss_scale},
                                   {"growth_tracker", s.loss_scale_growth_tracker},
                                   {"skipped_steps", s.skipped_steps}};
    return j;
}

TrainState train_state_from_json(const json& j, const std::string& source) {
    TrainState s;
    auto need = [&](const json& obj, const char* key, const char* where) -> const json& {
        LOOM_CHECK(obj.is_object() && obj.contains(key), "{}: missing '{}{}'", source, where, key);
        return obj[key];
    };
    try {
        s.global_step = need(j, "global_step", "").get<int64_t>();
        s.epoch = need(j, "epoch", "").get<double>();
        s.total_steps = j.value("max_steps", int64_t(0));
        const json& bm = need(j, "best_metric", "");
        if (!bm.is_null()) s.best_metric = bm.get<double>();
        const json& bc = need(j, "best_model_checkpoint", "");
        if (!bc.is_null()) s.best_model_checkpoint = bc.get<std::string>();
        s.tokens_seen = j.value("num_input_tokens_seen", int64_t(0));
        s.log_history = need(j, "log_history", "");
        const json& l = need(j, "loom", "");
        const json& pos = need(l, "loader", "loom.");
        s.loader_epoch = need(pos, "epoch", "loom.loader.").get<int64_t>();
        s.loader_batches = need(pos, "batches", "loom.loader.").get<int64_t>();
        s.seed = need(l, "seed", "loom.").get<uint64_t>();
        s.data_seed = need(l, "data_seed", "loom.").get<uint64_t>();
        s.samples_seen = need(l, "samples_seen", "loom.").get<int64_t>();
        s.patience_counter = need(l, "patience_counter", "loom.").get<int64_t>();
        s.last_eval = l.value("last_eval", json::object());
        if (l.contains("loss_scale")) {
            const json& ls = l["loss_scale"];
            s.loss_scale = need(ls, "scale", "loom.loss_scale.").get<double>();
            s.loss_scale_growth_tracker =
                need(ls, "growth_tracker", "loom.loss_scale.").get<int64_t>();
            s.skipped_steps = need(ls, "skipped_steps", "loom.loss_scale.").get<int64_t>();
        }
    } catch (const json::exception& e) {
        LOOM_FAIL("{}: a field has the wrong type ({})", source, e.what());
    }
    LOOM_CHECK(s.global_step >= 0 && s.loader_epoch >= 0 && s.loader_batches >= 0,
               "{}: negative step or data position", source);
    return s;
}

}  // namespace loom
