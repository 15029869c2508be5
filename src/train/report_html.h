// The run report: <output_dir>/report.html, one self-contained file (inline
// CSS and SVG, no scripts, nothing fetched) that opens in any browser:
// a summary, throughput, charts of the training loss (with the eval loss),
// the learning rate, the gradient norm and each evaluation metric against
// the step, the final metrics, and the resolved job file.
//
// It is built from the same log history that metrics.jsonl holds, so it can
// be regenerated after the fact from an output folder.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "train/log_jsonl.h"

namespace loom {

struct Throughput {
    double train_runtime_s = 0;  // 0 = unknown, row not shown
    double train_samples_per_second = 0;
    double train_steps_per_second = 0;
    double train_tokens_per_second = 0;
};

struct ReportInput {
    std::string title = "Loom training report";
    // Free-form facts shown first: task, model, layout, device, steps...
    std::vector<std::pair<std::string, std::string>> summary;
    Throughput throughput;
    std::vector<LogEntry> history;  // metrics.jsonl, in order
    // Final metrics (e.g. the last evaluation); empty = taken from the last
    // history entry that has eval_ values.
    std::vector<std::pair<std::string, double>> final_metrics;
    std::string job_yaml;  // job_to_yaml of the run
};

std::string render_report_html(const ReportInput& input);
// Written to a temporary file and renamed, so a reader never sees half a report.
void write_report_html(const std::string& path, const ReportInput& input);

}  // namespace loom
