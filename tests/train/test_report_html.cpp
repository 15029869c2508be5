// report.html: self-contained, every section present, values escaped, and
// the chart helpers' tick arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "train/report_html.h"
#include "train/svg_chart.h"
#include "train_test_util.h"

namespace loom {
namespace {

size_t count(const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
    return n;
}

ReportInput sample() {
    ReportInput in;
    in.summary = {{"task", "sequence-classification"}, {"model", "bert <tiny>"}};
    in.throughput = {125.5, 31.9, 3.99, 4080.0};
    for (int s = 10; s <= 100; s += 10)
        in.history.push_back(train_log_entry(s, s / 100.0, 1.0 / s, 0.5, 5e-5 * (1 - s / 100.0)));
    in.history.push_back(eval_log_entry(
        50, 0.5, {{"loss", 0.4}, {"accuracy", 0.75}, {"f1", 0.7}, {"runtime", 1.5}}));
    in.history.push_back(eval_log_entry(
        100, 1.0, {{"loss", 0.3}, {"accuracy", 0.875}, {"f1", 0.81}, {"runtime", 1.4}}));
    in.job_yaml = "task: sequence-classification\ndata:\n  text_column: \"<b>&\"\n";
    return in;
}

TEST(ReportHtml, SelfContainedWithAllSections) {
    std::string html = render_report_html(sample());
    EXPECT_TRUE(html.starts_with("<!DOCTYPE html>"));
    EXPECT_TRUE(html.ends_with("</html>\n"));
    // Nothing to fetch, nothing to run.
    EXPECT_EQ(count(html, "<script"), 0u);
    EXPECT_EQ(count(html, "http://"), count(html, "http://www.w3.org/2000/svg"));
    EXPECT_EQ(count(html, "https://"), 0u);
    // Charts: loss (+eval loss), learning rate, grad norm, eval accuracy, eval f1;
    // eval_runtime is bookkeeping, not a curve.
    EXPECT_EQ(count(html, "<svg"), 5u);
    EXPECT_NE(html.find("aria-label=\"Eval accuracy\""), std::string::npos);
    EXPECT_EQ(html.find("aria-label=\"Eval runtime\""), std::string::npos);
    EXPECT_NE(html.find(">eval loss</text>"), std::string::npos);  // legend of the loss chart
    // Throughput, final metrics (from the last evaluation), the escaped job.
    EXPECT_NE(html.find("<th>samples / s</th><td>31.9</td>"), std::string::npos);
    EXPECT_NE(html.find("<th>tokens / s</th><td>4080</td>"), std::string::npos);
    EXPECT_NE(html.find("0:02:06 (125.5 s)"), std::string::npos);
    EXPECT_NE(html.find("<th>eval_accuracy</th><td class=\"num\">0.875</td>"), std::string::npos);
    EXPECT_NE(html.find("text_column: &quot;&lt;b&gt;&amp;&quot;"), std::string::npos);
    EXPECT_NE(html.find("bert &lt;tiny&gt;"), std::string::npos);
    EXPECT_EQ(html.find("<b>&"), std::string::npos);
}

TEST(ReportHtml, LossChartHasOnePointPerLogLine) {
    ReportInput in = sample();
    ChartSpec spec{"Loss", "step", "loss", {}};
    ChartSeries s{"train loss", {}};
    for (const auto& e : in.history)
        if (e.has("loss")) s.points.emplace_back(*e.get("step"), *e.get("loss"));
    spec.series.push_back(s);
    std::string svg = svg_line_chart(spec);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(svg, m, std::regex("<polyline points=\"([^\"]*)\"")));
    EXPECT_EQ(count(m[1].str(), ","), 10u);
    EXPECT_EQ(count(svg, "<circle"), 10u);
    // A series without finite points draws a placeholder, not NaN coordinates.
    std::string empty = svg_line_chart({"Empty", "x", "y", {{"s", {{1.0, NAN}}}}});
    EXPECT_NE(empty.find("no data"), std::string::npos);
    EXPECT_EQ(empty.find("nan"), std::string::npos);
}

TEST(ReportHtml, WrittenAtomically) {
    auto dir = std::filesystem::temp_directory_path() / ("loom_report_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    write_report_html((dir / "out" / "report.html").string(), sample());
    EXPECT_TRUE(std::filesystem::exists(dir / "out" / "report.html"));
    EXPECT_FALSE(std::filesystem::exists(dir / "out" / "report.html.tmp"));
    std::filesystem::remove_all(dir);
}

TEST(SvgChart, NiceTicks) {
    EXPECT_EQ(nice_ticks(0, 1), (std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}));
    EXPECT_EQ(nice_ticks(3, 47), (std::vector<double>{0, 10, 20, 30, 40, 50}));
    // raw step 0.00037 / 5 = 7.4e-5 = 7.4 x 1e-5, which rounds up to 10 x 1e-5.
    auto t = nice_ticks(0.00012, 0.00049);
    EXPECT_NEAR(t.front(), 0.0001, 1e-12);
    EXPECT_NEAR(t.back(), 0.0005, 1e-12);
    EXPECT_NEAR(t[1] - t[0], 1e-4, 1e-12);
    EXPECT_EQ(nice_ticks(0, 0.9).size(), 6u);  // 0.9 / 5 = 0.18 -> step 0.2, 0 .. 1
    // A flat series still gets an axis around its value.
    auto flat = nice_ticks(2, 2);
    EXPECT_LT(flat.front(), 2);
    EXPECT_GT(flat.back(), 2);
    auto neg = nice_ticks(-3.2, 7.9);
    EXPECT_LE(neg.front(), -3.2);
    EXPECT_GE(neg.back(), 7.9);
    EXPECT_EQ(format_tick(0.25, 0.05), "0.25");
    EXPECT_EQ(format_tick(20, 10), "20");
    EXPECT_EQ(format_tick(5e-5, 1e-5), "5e-05");
    EXPECT_EQ(format_tick(0, 0.1), "0");
    EXPECT_EQ(html_escape("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&#39;");
}

}  // namespace
}  // namespace loom
