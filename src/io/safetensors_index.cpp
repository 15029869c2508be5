// Sharded safetensors checkpoints, as transformers' save_pretrained writes
// them: model.safetensors.index.json
//   {"metadata": {"total_size": N}, "weight_map": {"<tensor>": "model-00001-of-00002.safetensors"}}
// next to the shards. Reading: every shard is opened (and validated) by
// SafetensorsFile::open, then merged; names in the index are untrusted, so a
// shard must be a plain file name in the index's folder. Writing: tensors in
// name order fill shards up to max_shard_bytes (a tensor larger than that gets
// a shard of its own), as save_pretrained's split does.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/check.h"
#include "io/file_utils.h"
#include "io/safetensors.h"

namespace loom {

namespace fs = std::filesystem;
using nlohmann::json;

SafetensorsFile SafetensorsFile::open_index(const std::string& index_path) {
    std::ifstream in(index_path);
    LOOM_CHECK(in.good(), "cannot open the shard index '{}'", index_path);
    json j;
    try {
        j = json::parse(in);
    } catch (const std::exception& e) {
        LOOM_FAIL("{}: not valid JSON: {}", index_path, e.what());
    }
    LOOM_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object() &&
                   !j["weight_map"].empty(),
               "{}: expected {{\"weight_map\": {{tensor name: shard file}}}}", index_path);
    std::map<std::string, std::string> where;  // tensor -> shard
    std::set<std::string> shard_names;
    for (const auto& [name, v] : j["weight_map"].items()) {
        LOOM_CHECK(v.is_string(), "{}: weight_map[\"{}\"] is not a file name", index_path, name);
        const std::string f = v.get<std::string>();
        LOOM_CHECK(!f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos &&
                       f.find('\\') == std::string::npos && f.find('\0') == std::string::npos,
                   "{}: weight_map[\"{}\"] = \"{}\" is not a file name next to the index",
                   index_path, name, f);
        where[name] = f;
        shard_names.insert(f);
    }
    const fs::path dir = fs::path(index_path).parent_path();
    SafetensorsFile out;
    out.path_ = index_path;
    for (const std::string& shard : shard_names) {
        SafetensorsFile f = open((dir / shard).string());
        const size_t part = out.shards_.size();
        out.shards_.push_back({f.mapping_, f.data_start_});
        for (const std::string& name : f.names_) {
            LOOM_CHECK(!out.entries_.count(name), "{}: tensor '{}' is in two shards (the second: {})",
                       index_path, name, shard);
            Entry e = f.entries_.at(name);
            e.part = part;
            out.entries_.emplace(name, e);
            out.names_.push_back(name);
        }
        for (const auto& [k, v] : f.metadata_) out.metadata_[k] = v;
    }
    for (const auto& [name, shard] : where) {
        auto it = out.entries_.find(name);
        LOOM_CHECK(it != out.entries_.end() && *std::next(shard_names.begin(),
                                                         std::ptrdiff_t(it->second.part)) == shard,
                   "{}: the index puts '{}' in {}, which does not hold it", index_path, name, shard);
    }
    return out;
}

std::vector<std::string> safetensors_write_sharded(const std::string& dir,
                                                   const std::map<std::string, Tensor>& tensors,
                                                   uint64_t max_shard_bytes,
                                                   const std::map<std::string, std::string>& metadata) {
    LOOM_CHECK(max_shard_bytes > 0, "max_shard_size must be > 0");
    std::vector<std::vector<std::string>> groups(1);
    uint64_t in_group = 0, total = 0;
    for (const auto& [name, t] : tensors) {
        const uint64_t b = uint64_t(t.nbytes());
        if (in_group > 0 && in_group + b > max_shard_bytes) {
            groups.emplace_back();
            in_group = 0;
        }
        groups.back().push_back(name);
        in_group += b;
        total += b;
    }
    const fs::path d(dir);
    std::vector<std::string> files;
    if (groups.size() == 1) {
        safetensors_write((d / "model.safetensors").string(), tensors, metadata);
        fs::remove(d / "model.safetensors.index.json");
        return {"model.safetensors"};
    }
    json index = {{"metadata", {{"total_size", total}}}, {"weight_map", json::object()}};
    for (size_t g = 0; g < groups.size(); ++g) {
        const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", g + 1, groups.size());
        std::map<std::string, Tensor> part;
        for (const auto& name : groups[g]) {
            part.emplace(name, tensors.at(name));
            index["weight_map"][name] = file;
        }
        safetensors_write((d / file).string(), part, metadata);
        files.push_back(file);
    }
    write_file_atomic((d / "model.safetensors.index.json").string(), index.dump(2) + "\n");
    fs::remove(d / "model.safetensors");  // a single file from before would shadow the index
    files.push_back("model.safetensors.index.json");
    return files;
}

uint64_t parse_shard_size(const std::string& text) {
    // save_pretrained's convert_file_size_to_int: GB = 10^9, GiB = 2^30.
    size_t pos = 0;
    double v = 0;
    try {
        v = std::stod(text, &pos);
    } catch (const std::exception&) {
        pos = 0;
    }
    std::string unit = text.substr(pos);
    while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
    static const std::pair<const char*, double> units[] = {
        {"", 1},          {"B", 1},          {"KB", 1e3},   {"MB", 1e6},
        {"GB", 1e9},      {"TB", 1e12},      {"KiB", 1024}, {"MiB", 1048576.0},
        {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    for (const auto& [u, scale] : units)
        if (pos > 0 && unit == u && v > 0) return uint64_t(v * scale);
    LOOM_FAIL("max_shard_size '{}': expected a size such as 5GB, 500MB, 2GiB or a byte count", text);
}

std::string safetensors_weights_in(const std::string& dir) {
    const fs::path single = fs::path(dir) / "model.safetensors";
    const fs::path index = fs::path(dir) / "model.safetensors.index.json";
    return (!fs::exists(single) && fs::exists(index)) ? index.string() : single.string();
}

}  // namespace loom
