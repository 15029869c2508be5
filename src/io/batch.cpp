// Batch loading: safetensors -> owned I64 tensors, with errors that list what
// the file does hold.
#include "io/batch.h"

#include "core/check.h"
#include "io/safetensors.h"

namespace loom {

namespace {
std::string join_keys(const std::vector<std::string>& keys) {
    std::string s;
    for (const auto& k : keys) s += (s.empty() ? "'" : ", '") + k + "'";
    return s.empty() ? "none" : s;
}
}  // namespace

std::vector<std::string> Batch::keys() const {
    std::vector<std::string> k;
    for (const auto& [name, t] : tensors) k.push_back(name);
    return k;
}

const Tensor& Batch::require(const std::string& key) const {
    auto it = tensors.find(key);
    LOOM_CHECK(it != tensors.end(), "batch {}: missing key '{}' (keys present: {})", path, key,
               join_keys(keys()));
    return it->second;
}

std::optional<Tensor> Batch::find(const std::string& key) const {
    auto it = tensors.find(key);
    if (it == tensors.end()) return std::nullopt;
    return it->second;
}

Batch load_batch(const std::string& path) {
    SafetensorsFile f = SafetensorsFile::open(path);
    Batch b;
    b.path = path;
    for (const std::string& name : f.names()) {
        Tensor t = f.get(name);
        LOOM_CHECK(t.dtype == DType::i64 || t.dtype == DType::i32,
                   "batch {}: tensor '{}' is {} {}, expected integer ids (I64 or I32)", path, name,
                   dtype_safetensors_name(t.dtype), t.shape.to_string());
        // Copies detach the batch from the read-only mapping.
        b.tensors.emplace(name, t.dtype == DType::i64 ? t.clone() : t.to(DType::i64));
    }
    return b;
}

std::vector<std::string> label_keys(Task task) {
    switch (task) {
        case Task::base: return {};
        case Task::question_answering: return {"start_positions", "end_positions"};
        default: return {"labels"};
    }
}

ModelInputs inputs_from_batch(const Batch& batch, Task task, bool require_labels) {
    const Tensor& ids = batch.require("input_ids");
    LOOM_CHECK(ids.shape.ndim == 2 && ids.shape[0] > 0 && ids.shape[1] > 0,
               "{}: 'input_ids' must have shape [B, T], found {}", batch.path,
               ids.shape.to_string());
    ModelInputs in;
    in.B = ids.shape[0];
    in.T = ids.shape[1];
    in.input_ids = ids.data<int64_t>();
    const Shape bt{in.B, in.T}, b{in.B};
    auto check_shape = [&](const Tensor& t, const std::string& key, const Shape& want) {
        LOOM_CHECK(t.shape == want, "{}: '{}' has shape {}, expected {} (input_ids is {})",
                   batch.path, key, t.shape.to_string(), want.to_string(), ids.shape.to_string());
        return t.data<int64_t>();
    };
    // find() hands back a copy of the view; the data stays owned by `batch`.
    if (auto t = batch.find("attention_mask")) in.attention_mask = check_shape(*t, "attention_mask", bt);
    if (auto t = batch.find("token_type_ids")) in.token_type_ids = check_shape(*t, "token_type_ids", bt);
    if (auto t = batch.find("position_ids")) in.position_ids = check_shape(*t, "position_ids", bt);

    const std::vector<std::string> keys = label_keys(task);
    if (keys.empty()) return in;
    if (!require_labels) {
        bool all = true;
        for (const auto& k : keys) all = all && batch.contains(k);
        if (!all) return in;  // forward only, no loss
    }
    switch (task) {
        case Task::sequence_classification:
            in.labels = check_shape(batch.require("labels"), "labels", b);
            break;
        case Task::question_answering:
            in.start_positions = check_shape(batch.require("start_positions"), "start_positions", b);
            in.end_positions = check_shape(batch.require("end_positions"), "end_positions", b);
            break;
        default: in.labels = check_shape(batch.require("labels"), "labels", bt); break;
    }
    return in;
}

}  // namespace loom
