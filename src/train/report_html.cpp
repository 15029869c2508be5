// report.html (see report_html.h). Every value written into the page passes
// through html_escape; numbers use 4-6 significant digits.
#include "train/report_html.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/check.h"
#include "train/svg_chart.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

const char* const k_style = R"(
body { font: 14px/1.45 -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: #222; margin: 24px auto; max-width: 1360px; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px; }
.meta { color: #666; }
table { border-collapse: collapse; margin: 8px 0; }
td, th { border-bottom: 1px solid #e3e3e3; padding: 4px 14px 4px 0; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
svg.chart { background: #fff; border: 1px solid #ddd; border-radius: 4px; }
svg .title { font-size: 14px; font-weight: 600; fill: #222; }
svg .grid { stroke: #eee; } svg .axis { stroke: #555; }
svg .xtick { font-size: 11px; fill: #555; text-anchor: middle; }
svg .ytick { font-size: 11px; fill: #555; text-anchor: end; }
svg .xlabel, svg .ylabel { font-size: 12px; fill: #333; text-anchor: middle; }
svg .legend { font-size: 12px; fill: #333; } svg .empty { fill: #999; }
pre { background: #f6f8fa; border: 1px solid #e3e3e3; padding: 12px; overflow-x: auto;
      font-size: 12.5px; }
)";

std::string number(double v) {
    if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
    double a = std::fabs(v);
    if (v == std::floor(v) && a < 1e12) return fmt::format("{}", static_cast<int64_t>(v));
    if (a >= 1e-3 && a < 1e6) return fmt::format("{:.6g}", v);
    return fmt::format("{:.4e}", v);
}

std::string duration(double s) {
    auto total = static_cast<int64_t>(std::llround(s));
    return fmt::format("{}:{:02}:{:02} ({} s)", total / 3600, (total / 60) % 60, total % 60,
                       number(s));
}

// (step, key) points of every entry that has `key`.
ChartSeries series_of(const std::vector<LogEntry>& history, const std::string& key,
                      const std::string& name) {
    ChartSeries s{name, {}};
    for (const auto& e : history) {
        auto step = e.get("step");
        auto v = e.get(key);
        if (step && v) s.points.emplace_back(*step, *v);
    }
    return s;
}

bool has_key(const std::vector<LogEntry>& history, const std::string& key) {
    for (const auto& e : history)
        if (e.has(key)) return true;
    return false;
}

// Speed figures HF logs next to eval metrics; they are not curves of interest.
bool is_bookkeeping(const std::string& key) {
    return key == "eval_loss" || key == "eval_runtime" || key == "eval_samples_per_second" ||
           key == "eval_steps_per_second" || key == "eval_tokens_per_second";
}

std::string table_rows(const std::vector<std::pair<std::string, std::string>>& rows) {
    std::string out;
    for (const auto& [k, v] : rows)
        out += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", html_escape(k), html_escape(v));
    return out;
}

std::string charts(const std::vector<LogEntry>& history) {
    std::string out = "<div class=\"charts\">\n";
    ChartSpec loss{"Loss", "step", "loss", {series_of(history, "loss", "train loss")}};
    if (has_key(history, "eval_loss")) loss.series.push_back(series_of(history, "eval_loss", "eval loss"));
    out += svg_line_chart(loss);
    out += svg_line_chart(
        {"Learning rate", "step", "learning rate", {series_of(history, "learning_rate", "lr")}});
    if (has_key(history, "grad_norm"))
        out += svg_line_chart(
            {"Gradient norm (before clipping)", "step", "grad norm",
             {series_of(history, "grad_norm", "grad norm")}});
    std::set<std::string> seen;
    for (const auto& e : history)
        for (const auto& [key, v] : e.values) {
            if (!key.starts_with("eval_") || is_bookkeeping(key) || !seen.insert(key).second)
                continue;
            std::string name = key.substr(5);
            out += svg_line_chart({"Eval " + name, "step", name, {series_of(history, key, name)}});
        }
    return out + "</div>\n";
}

}  // namespace

std::string render_report_html(const ReportInput& in) {
    std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
    html += fmt::format("<title>{}</title>\n<style>{}</style>\n</head>\n<body>\n",
                        html_escape(in.title), k_style);
    auto now = std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now());
    html += fmt::format("<h1>{}</h1>\n<p class=\"meta\">Generated {:%Y-%m-%d %H:%M:%S} UTC</p>\n",
                        html_escape(in.title), now);

    if (!in.summary.empty())
        html += "<h2>Run</h2>\n<table>\n" + table_rows(in.summary) + "</table>\n";

    const Throughput& t = in.throughput;
    std::vector<std::pair<std::string, std::string>> speed;
    if (t.train_runtime_s > 0) speed.emplace_back("train runtime", duration(t.train_runtime_s));
    if (t.train_samples_per_second > 0)
        speed.emplace_back("samples / s", number(t.train_samples_per_second));
    if (t.train_steps_per_second > 0)
        speed.emplace_back("steps / s", number(t.train_steps_per_second));
    if (t.train_tokens_per_second > 0)
        speed.emplace_back("tokens / s", number(t.train_tokens_per_second));
    if (!speed.empty()) html += "<h2>Throughput</h2>\n<table>\n" + table_rows(speed) + "</table>\n";

    html += "<h2>Curves</h2>\n" + charts(in.history);

    std::vector<std::pair<std::string, double>> finals = in.final_metrics;
    if (finals.empty())
        for (auto it = in.history.rbegin(); it != in.history.rend() && finals.empty(); ++it)
            for (const auto& [k, v] : it->values)
                if (k.starts_with("eval_") || k == "step" || k == "epoch") finals.emplace_back(k, v);
    bool any_eval = false;
    for (const auto& [k, v] : finals) any_eval |= k != "step" && k != "epoch";
    if (any_eval) {
        html += "<h2>Final metrics</h2>\n<table>\n";
        for (const auto& [k, v] : finals)
            html += fmt::format("<tr><th>{}</th><td class=\"num\">{}</td></tr>\n", html_escape(k),
                                number(v));
        html += "</table>\n";
    }
    if (!in.job_yaml.empty())
        html += "<h2>Job</h2>\n<pre>" + html_escape(in.job_yaml) + "</pre>\n";
    return html + "</body>\n</html>\n";
}

void write_report_html(const std::string& path, const ReportInput& input) {
    const std::string html = render_report_html(input);
    fs::path p(path);
    if (p.has_parent_path()) fs::create_directories(p.parent_path());
    const std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    LOOM_CHECK(f != nullptr, "cannot write report '{}': {}", tmp, std::strerror(errno));
    bool ok = std::fwrite(html.data(), 1, html.size(), f) == html.size();
    ok = (std::fclose(f) == 0) && ok;
    LOOM_CHECK(ok, "writing report '{}' failed", tmp);
    fs::rename(tmp, path);
}

}  // namespace loom
