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

}  // namespace loom
