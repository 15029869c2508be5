// metrics.jsonl writer and reader (see log_jsonl.h).
#include "train/log_jsonl.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/check.h"

namespace loom {

namespace fs = std::filesystem;

void LogEntry::set(std::string_view name, double value) {
    for (auto& [k, v] : values)
        if (k == name) {
            v = value;
            return;
        }
    values.emplace_back(std::string(name), value);
}

std::optional<double> LogEntry::get(std::string_view name) const {
    for (const auto& [k, v] : values)
        if (k == name) return v;
    return std::nullopt;
}

LogEntry train_log_entry(int64_t step, double epoch, double loss, double grad_norm,
                         double learning_rate) {
    LogEntry e;
    e.set("loss", loss);
    if (grad_norm >= 0) e.set("grad_norm", grad_norm);
    e.set("learning_rate", learning_rate);
    e.set("epoch", epoch);
    e.set("step", static_cast<double>(step));
    return e;
}

LogEntry eval_log_entry(int64_t step, double epoch,
                        const std::vector<std::pair<std::string, double>>& metrics) {
    LogEntry e;
    for (const auto& [name, value] : metrics)
        e.set(name.starts_with("eval_") ? name : "eval_" + name, value);
    e.set("epoch", epoch);
    e.set("step", static_cast<double>(step));
    return e;
}

std::string log_entry_to_json(const LogEntry& entry) {
    std::string out = "{";
    for (size_t i = 0; i < entry.values.size(); ++i) {
        const auto& [k, v] = entry.values[i];
        if (i) out += ", ";
        out += nlohmann::json(k).dump();  // a quoted, escaped key
        out += ": ";
        // Shortest text that reads back to the same double; integers as "12".
        out += std::isfinite(v) ? fmt::format("{}", v) : "null";
    }
    return out + "}";
}

std::vector<LogEntry> read_metrics_jsonl(const std::string& path) {
    std::ifstream in(path);
    LOOM_CHECK(in.good(), "cannot open metrics log '{}'", path);
    std::vector<LogEntry> out;
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        auto j = nlohmann::ordered_json::parse(line, nullptr, false);
        LOOM_CHECK(!j.is_discarded() && j.is_object(), "{}:{}: not a JSON object", path, n);
        LogEntry e;
        for (auto it = j.begin(); it != j.end(); ++it) {
            if (it->is_null()) continue;
            LOOM_CHECK(it->is_number(), "{}:{}: '{}' is not a number", path, n, it.key());
            e.set(it.key(), it->get<double>());
        }
        out.push_back(std::move(e));
    }
    return out;
}

JsonlLogger::JsonlLogger(const std::string& output_dir, int64_t resume_step) {
    fs::create_directories(output_dir);
    path_ = (fs::path(output_dir) / "metrics.jsonl").string();
    std::vector<LogEntry> kept;
    if (resume_step >= 0 && fs::exists(path_)) {
        for (auto& e : read_metrics_jsonl(path_))
            // A summary belongs to the run that wrote it: the resumed run
            // ends with its own.
            if (e.get("step").value_or(0) <= static_cast<double>(resume_step) &&
                !e.has("train_runtime"))
                kept.push_back(std::move(e));
    }
    f_ = std::fopen(path_.c_str(), "w");
    LOOM_CHECK(f_ != nullptr, "cannot write metrics log '{}': {}", path_, std::strerror(errno));
    for (const auto& e : kept) log(e);
}

JsonlLogger::~JsonlLogger() {
    if (f_) std::fclose(f_);
}

void JsonlLogger::log(const LogEntry& entry) {
    std::string line = log_entry_to_json(entry) + "\n";
    bool ok = std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0;
    LOOM_CHECK(ok, "writing metrics log '{}' failed: {}", path_, std::strerror(errno));
}

}  // namespace loom
