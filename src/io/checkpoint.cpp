// Atomic checkpoint folders: write into .tmp-checkpoint-<step>, hash, manifest, rename.
#include "io/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>

#include "core/check.h"
#include "core/fault_points.h"
#include "io/file_utils.h"
#include "io/safetensors.h"

namespace loom {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* k_prefix = "checkpoint-";
constexpr const char* k_tmp_prefix = ".tmp-checkpoint-";

void fsync_path(const std::string& path, bool directory) {
    const int fd = ::open(path.c_str(), (directory ? O_DIRECTORY : 0) | O_RDONLY);
    if (fd < 0) return;  // best effort: the rename below is what must not be reordered
    ::fsync(fd);
    ::close(fd);
}

void remove_tree(const std::string& path) {
    std::error_code ec;
    fs::remove_all(path, ec);
    LOOM_CHECK(!ec, "cannot remove {}: {}", path, ec.message());
}

// checkpoint-<digits> -> step; -1 for any other name.
int64_t step_of(const std::string& name) {
    const std::string p = k_prefix;
    if (name.size() <= p.size() || name.compare(0, p.size(), p) != 0) return -1;
    int64_t v = 0;
    for (size_t i = p.size(); i < name.size(); ++i) {
        if (name[i] < '0' || name[i] > '9') return -1;
        v = v * 10 + (name[i] - '0');
    }
    return v;
}

uint64_t mix(uint64_t h, uint64_t w) {
    h ^= w;
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

}  // namespace

std::string file_hash_hex(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    LOOM_CHECK(in.good(), "cannot read {}: {}", path, std::strerror(errno));
    // Four independent lanes so the multiply latency overlaps; words are
    // assigned to lanes by position, so the result depends only on the bytes.
    uint64_t lane[4] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull, 0xA4093822299F31D0ull,
                        0x082EFA98EC4E6C89ull};
    std::vector<char> buf(size_t(4) << 20);
    uint64_t total = 0;
    for (;;) {
        in.read(buf.data(), std::streamsize(buf.size()));
        const size_t n = size_t(in.gcount());
        if (n == 0) break;
        size_t i = 0;
        // buf.size() is a multiple of 32, so only the last chunk has a tail.
        for (; i + 32 <= n; i += 32) {
            uint64_t w[4];
            std::memcpy(w, buf.data() + i, 32);
            for (int k = 0; k < 4; ++k) lane[k] = mix(lane[k], w[k]);
        }
        for (; i < n; i += 8) {
            uint64_t w = 0;
            std::memcpy(&w, buf.data() + i, std::min<size_t>(8, n - i));
            lane[(i / 8) % 4] = mix(lane[(i / 8) % 4], w);
        }
        total += n;
        if (n < buf.size()) break;
    }
    LOOM_CHECK(!in.bad(), "error reading {}: {}", path, std::strerror(errno));
    uint64_t h = mix(0x452821E638D01377ull, total);
    for (uint64_t l : lane) h = mix(h, l);
    return fmt::format("{:016x}", h);
}

CheckpointWriter::CheckpointWriter(std::string output_dir, int64_t step)
    : output_dir_(std::move(output_dir)), step_(step) {
    ensure_dir(output_dir_);
    tmp_dir_ = (fs::path(output_dir_) / (k_tmp_prefix + std::to_string(step))).string();
    final_dir_ = (fs::path(output_dir_) / (k_prefix + std::to_string(step))).string();
    // A leftover from a crashed writer: never a checkpoint, safe to drop.
    if (fs::exists(tmp_dir_)) remove_tree(tmp_dir_);
    ensure_dir(tmp_dir_);
}

CheckpointWriter::~CheckpointWriter() {
    if (!committed_) {
        std::error_code ec;
        fs::remove_all(tmp_dir_, ec);
    }
}

void CheckpointWriter::add_tensors(const std::string& file,
                                   const std::map<std::string, Tensor>& tensors,
                                   const std::map<std::string, std::string>& metadata) {
    safetensors_write((fs::path(tmp_dir_) / file).string(), tensors, metadata);
    fault_point("checkpoint_write");
    files_.push_back(file);
}

void CheckpointWriter::add_text(const std::string& file, std::string_view text) {
    write_file_atomic((fs::path(tmp_dir_) / file).string(), text);
    files_.push_back(file);
}

void CheckpointWriter::add_copy(const std::string& file, const std::string& source_path) {
    add_text(file, read_file(source_path));
}

std::string CheckpointWriter::commit() {
    LOOM_ASSERT(!committed_, "checkpoint {} committed twice", final_dir_);
    json manifest = {{"format", "loom-checkpoint"},
                     {"version", k_checkpoint_version},
                     {"step", step_},
                     {"files", json::object()}};
    for (const std::string& f : files_) {
        const std::string p = (fs::path(tmp_dir_) / f).string();
        manifest["files"][f] = {{"bytes", int64_t(fs::file_size(p))}, {"hash", file_hash_hex(p)}};
    }
    write_file_atomic((fs::path(tmp_dir_) / std::string(k_checkpoint_manifest)).string(),
                      manifest.dump(2) + "\n");
    fsync_path(tmp_dir_, true);
    // An older folder of the same step (a run restarted from scratch with
    // overwrite_output_dir) is moved aside first: rename() cannot replace a
    // non-empty directory.
    std::string old_dir;
    if (fs::exists(final_dir_)) {
        old_dir = final_dir_ + ".old";
        if (fs::exists(old_dir)) remove_tree(old_dir);
        fs::rename(final_dir_, old_dir);
    }
    std::error_code ec;
    fs::rename(tmp_dir_, final_dir_, ec);
    LOOM_CHECK(!ec, "cannot rename {} to {}: {}", tmp_dir_, final_dir_, ec.message());
    fsync_path(output_dir_, true);
    committed_ = true;
    if (!old_dir.empty()) remove_tree(old_dir);
    return final_dir_;
}

namespace {

// Every checkpoint-<step> folder, complete or not, ascending by step.
std::vector<CheckpointInfo> step_folders(const std::string& output_dir) {
    std::vector<CheckpointInfo> out;
    std::error_code ec;
    if (!fs::is_directory(output_dir, ec)) return out;
    for (const auto& e : fs::directory_iterator(output_dir)) {
        if (!e.is_directory()) continue;
        const int64_t s = step_of(e.path().filename().string());
        if (s >= 0) out.push_back({e.path().string(), s});
    }
    std::sort(out.begin(), out.end(),
              [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step < b.step; });
    return out;
}

}  // namespace

std::vector<CheckpointInfo> list_checkpoints(const std::string& output_dir) {
    std::vector<CheckpointInfo> out;
    for (auto& c : step_folders(output_dir))
        if (fs::exists(fs::path(c.path) / std::string(k_checkpoint_manifest)))
            out.push_back(std::move(c));
    return out;
}

std::string checkpoint_incomplete_reason(const std::string& dir) {
    const fs::path mpath = fs::path(dir) / std::string(k_checkpoint_manifest);
    if (!fs::exists(mpath)) return fmt::format("no {} (it is written last)", k_checkpoint_manifest);
    json m;
    try {
        m = json::parse(read_file(mpath.string()));
    } catch (const json::exception&) {
        return fmt::format("{} is not valid JSON", k_checkpoint_manifest);
    }
    if (!m.is_object() || !m.contains("files") || !m["files"].is_object())
        return fmt::format("{} lists no files", k_checkpoint_manifest);
    for (auto it = m["files"].begin(); it != m["files"].end(); ++it) {
        const fs::path p = fs::path(dir) / it.key();
        std::error_code ec;
        const auto have = fs::file_size(p, ec);
        if (ec) return fmt::format("{} is missing", it.key());
        const int64_t want = it.value().is_object() ? it.value().value("bytes", int64_t(-1)) : -1;
        if (int64_t(have) != want)
            return fmt::format("{} has {} bytes, the manifest says {}", it.key(), have, want);
    }
    return "";
}

std::optional<CheckpointInfo> newest_complete_checkpoint(const std::string& output_dir,
                                                         std::vector<std::string>* skipped) {
    const auto all = step_folders(output_dir);
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
        const std::string why = checkpoint_incomplete_reason(it->path);
        if (why.empty()) return *it;
        if (skipped)
            skipped->push_back(fmt::format("{}: {}", fs::path(it->path).filename().string(), why));
    }
    return std::nullopt;
}

int64_t remove_checkpoints(const std::string& output_dir) {
    int64_t n = 0;
    std::error_code ec;
    if (!fs::is_directory(output_dir, ec)) return 0;
    std::vector<std::string> doomed;
    for (const auto& e : fs::directory_iterator(output_dir)) {
        if (!e.is_directory()) continue;
        std::string name = e.path().filename().string();
        // A download that stopped half way (io/remote_checkpoint.h).
        const bool download = name.starts_with(".tmp-download-checkpoint-");
        if (name.starts_with(k_tmp_prefix))
            name = k_prefix + name.substr(std::strlen(k_tmp_prefix));
        if (name.ends_with(".old")) name.resize(name.size() - 4);
        if (download || step_of(name) >= 0) doomed.push_back(e.path().string());
    }
    for (const auto& p : doomed) {
        remove_tree(p);
        ++n;
    }
    return n;
}

int64_t verify_checkpoint(const std::string& dir) {
    const std::string mpath = (fs::path(dir) / std::string(k_checkpoint_manifest)).string();
    LOOM_CHECK(fs::exists(mpath),
               "checkpoint {} is incomplete or not a Loom checkpoint: {} is missing\n"
               "HINT: pick another checkpoint-<step> folder, or start fresh without "
               "resume_from_checkpoint",
               dir, k_checkpoint_manifest);
    json m;
    try {
        m = json::parse(read_file(mpath));
    } catch (const json::exception& e) {
        LOOM_FAIL("checkpoint {}: {} is not valid JSON ({})", dir, k_checkpoint_manifest, e.what());
    }
    LOOM_CHECK(m.is_object() && m.value("format", "") == "loom-checkpoint",
               "checkpoint {}: {} does not say format \"loom-checkpoint\"", dir,
               k_checkpoint_manifest);
    LOOM_CHECK(m.contains("version") && m["version"].is_number_integer() &&
                   m["version"].get<int>() == k_checkpoint_version,
               "checkpoint {}: format version {} is not the supported {}", dir,
               m.value("version", json()).dump(), k_checkpoint_version);
    LOOM_CHECK(m.contains("files") && m["files"].is_object() && m.contains("step") &&
                   m["step"].is_number_integer(),
               "checkpoint {}: {} lacks 'files' or 'step'", dir, k_checkpoint_manifest);
    for (auto it = m["files"].begin(); it != m["files"].end(); ++it) {
        const std::string p = (fs::path(dir) / it.key()).string();
        LOOM_CHECK(fs::exists(p), "checkpoint {}: file {} listed in the manifest is missing", dir,
                   it.key());
        const int64_t want = it.value().value("bytes", int64_t(-1));
        const int64_t have = int64_t(fs::file_size(p));
        LOOM_CHECK(want == have,
                   "checkpoint {}: {} has {} bytes, the manifest says {} (truncated "
                   "or overwritten)",
                   dir, it.key(), have, want);
        const std::string h = file_hash_hex(p);
        LOOM_CHECK(h == it.value().value("hash", ""),
                   "checkpoint {}: {} is corrupt (content hash {} differs from the manifest's {})",
                   dir, it.key(), h, it.value().value("hash", ""));
    }
    return m["step"].get<int64_t>();
}

std::vector<std::string> rotate_checkpoints(const std::string& output_dir, int64_t limit,
                                            const std::string& best_path) {
    std::vector<std::string> deleted;
    if (limit <= 0) return deleted;
    auto all = list_checkpoints(output_dir);
    std::vector<std::string> order;
    for (const auto& c : all) order.push_back(c.path);
    const auto same = [](const std::string& a, const std::string& b) {
        std::error_code ec;
        return !a.empty() && !b.empty() && fs::equivalent(a, b, ec);
    };
    int64_t keep = limit;
    auto best = std::find_if(order.begin(), order.end(),
                             [&](const std::string& p) { return same(p, best_path); });
    if (best != order.end() && best + 1 != order.end()) {
        // HF: move the best to the second newest slot; with limit 1 keep two.
        const std::string b = *best;
        order.erase(best);
        order.insert(order.end() - 1, b);
        if (limit == 1) keep = 2;
    }
    const int64_t n_delete = int64_t(order.size()) - keep;
    for (int64_t i = 0; i < n_delete; ++i) {
        remove_tree(order[size_t(i)]);
        deleted.push_back(order[size_t(i)]);
    }
    return deleted;
}

}  // namespace loom
