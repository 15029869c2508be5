// Training logs as JSON lines: <output_dir>/metrics.jsonl, one object per
// logging step and per evaluation, keyed with HF Trainer's log_history names
// ({"loss": .., "grad_norm": .., "learning_rate": .., "epoch": .., "step": ..},
// {"eval_loss": .., "eval_accuracy": .., ..., "epoch": .., "step": ..}).
//
// Each line is flushed as it is written, so `tail -f` and a crashed run both
// see every finished step. The file is strict JSON: a NaN or infinite value
// is written as null (Python's json would write NaN, which jq and most
// parsers reject). Resuming from step S rewrites the file without the lines
// past S, so the log matches the checkpoint it continues from.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace loom {

// One log record: named numbers, in the order they were set.
struct LogEntry {
    std::vector<std::pair<std::string, double>> values;

    // Sets (or replaces) a value, keeping first-set order.
    void set(std::string_view name, double value);
    std::optional<double> get(std::string_view name) const;
    bool has(std::string_view name) const { return get(name).has_value(); }
};

// A training log line in HF's key order; grad_norm is left out when < 0
// (not computed, e.g. clipping off).
LogEntry train_log_entry(int64_t step, double epoch, double loss, double grad_norm,
                         double learning_rate);
// An evaluation line: each metric is written as eval_<name> ("loss" ->
// "eval_loss", "accuracy" -> "eval_accuracy"), then epoch and step.
LogEntry eval_log_entry(int64_t step, double epoch,
                        const std::vector<std::pair<std::string, double>>& metrics);

class JsonlLogger {
  public:
    // Creates output_dir if needed. resume_step < 0 starts a new file;
    // otherwise earlier lines with step <= resume_step are kept, except a
    // finished run's summary (train_runtime, ...), which the resumed run
    // writes anew.
    explicit JsonlLogger(const std::string& output_dir, int64_t resume_step = -1);
    ~JsonlLogger();
    JsonlLogger(const JsonlLogger&) = delete;
    JsonlLogger& operator=(const JsonlLogger&) = delete;

    void log(const LogEntry& entry);
    const std::string& path() const { return path_; }

  private:
    std::string path_;
    std::FILE* f_ = nullptr;
};

// One line of JSON for an entry (no newline).
std::string log_entry_to_json(const LogEntry& entry);
// Reads metrics.jsonl back (null values are skipped); errors name file:line.
std::vector<LogEntry> read_metrics_jsonl(const std::string& path);

}  // namespace loom
