// safetensors writer: header JSON padded to a multiple of 8 (so the data, and
// every tensor whose predecessors have 8-byte multiples, stays aligned), then
// the tensors in name order, contiguous. Written through AtomicFileWriter, so
// a crash leaves either the old file or the complete new one under `path`.
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "io/file_utils.h"
#include "io/safetensors.h"

namespace loom {

void safetensors_write(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    using json = nlohmann::json;
    // Built by hand rather than as one json object so the order is exactly
    // __metadata__ first, then names in sorted order, like torch's writer.
    std::string header = "{";
    try {
        if (!metadata.empty()) header += "\"__metadata__\":" + json(metadata).dump();
        uint64_t offset = 0;
        for (const auto& [name, t] : tensors) {
            LOOM_CHECK(name != "__metadata__", "{}: '__metadata__' is reserved, not a tensor name",
                       path);
            LOOM_CHECK(t.defined(), "{}: tensor '{}' has no storage", path, name);
            LOOM_CHECK(t.storage->device() == Device::cpu,
                       "{}: tensor '{}' is not on the CPU; copy it to the host before saving", path,
                       name);
            LOOM_CHECK(t.offset_bytes + t.nbytes() <= t.storage->nbytes(),
                       "{}: tensor '{}' ({} bytes at offset {}) exceeds its storage of {} bytes",
                       path, name, t.nbytes(), t.offset_bytes, t.storage->nbytes());
            json shape = json::array();
            for (int i = 0; i < t.shape.ndim; ++i) shape.push_back(t.shape[i]);
            json e = {{"dtype", dtype_safetensors_name(t.dtype)},
                      {"shape", shape},
                      {"data_offsets", {offset, offset + t.nbytes()}}};
            if (header.size() > 1) header += ',';
            header += json(name).dump() + ":" + e.dump();
            offset += t.nbytes();
        }
    } catch (const json::exception& e) {
        // Names and metadata must be valid UTF-8 to be stored as JSON.
        LOOM_FAIL("{}: cannot encode the safetensors header: {}", path, e.what());
    }
    header += '}';
    header.append((8 - header.size() % 8) % 8, ' ');

    AtomicFileWriter w(path);
    const uint64_t n = header.size();
    w.write(&n, sizeof n);  // little-endian host (static_assert in safetensors.cpp)
    w.write(header);
    for (const auto& [name, t] : tensors)
        if (t.nbytes()) w.write(t.raw(), t.nbytes());
    w.commit();
}

}  // namespace loom
