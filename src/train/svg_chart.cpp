// SVG line charts for the run report (see svg_chart.h).
#include "train/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom {

namespace {

const char* const k_palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

// Plot area inside the SVG (pixels).
constexpr double k_left = 72, k_right = 16, k_top = 34, k_bottom = 46;

}  // namespace

std::string html_escape(const std::string& text) {
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&#39;"; break;
            default: out.push_back(c);
        }
    }
    return out;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
    if (!(hi > lo)) {
        // One value: open a window around it.
        double pad = lo == 0 ? 1.0 : std::fabs(lo) * 0.1;
        lo -= pad;
        hi += pad;
    }
    double raw = (hi - lo) / std::max(1, target);
    double mag = std::pow(10.0, std::floor(std::log10(raw)));
    double norm = raw / mag;
    double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
    double first = std::floor(lo / step + 1e-9) * step;
    double last = std::ceil(hi / step - 1e-9) * step;
    std::vector<double> ticks;
    for (int i = 0;; ++i) {
        double t = first + i * step;
        if (std::fabs(t) < step * 1e-9) t = 0;  // no "-0" or 1e-17 labels
        ticks.push_back(t);
        if (t >= last - step * 1e-9 || i > 1000) break;
    }
    return ticks;
}

std::string format_tick(double value, double step) {
    if (value == 0) return "0";
    double big = std::max(std::fabs(value), std::fabs(step));
    if (step < 1e-4 || big >= 1e6) return fmt::format("{:.3g}", value);
    int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
    return fmt::format("{:.{}f}", value, decimals);
}

std::string svg_line_chart(const ChartSpec& spec) {
    const double w = spec.width, h = spec.height;
    const double pw = w - k_left - k_right, ph = h - k_top - k_bottom;
    double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin;
    double ymin = xmin, ymax = -xmin;
    std::vector<ChartSeries> series;
    for (const auto& s : spec.series) {
        ChartSeries clean{s.name, {}};
        for (auto [x, y] : s.points)
            if (std::isfinite(x) && std::isfinite(y)) clean.points.emplace_back(x, y);
        std::sort(clean.points.begin(), clean.points.end());
        for (auto [x, y] : clean.points) {
            xmin = std::min(xmin, x);
            xmax = std::max(xmax, x);
            ymin = std::min(ymin, y);
            ymax = std::max(ymax, y);
        }
        if (!clean.points.empty()) series.push_back(std::move(clean));
    }
    std::string svg = fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"{0}\" height=\"{1}\" "
        "viewBox=\"0 0 {0} {1}\" role=\"img\" aria-label=\"{2}\">\n"
        "<text x=\"{3}\" y=\"20\" class=\"title\">{2}</text>\n",
        spec.width, spec.height, html_escape(spec.title), k_left);
    if (series.empty()) {
        svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"empty\">no data</text>\n</svg>\n",
                           w / 2 - 24, h / 2);
        return svg;
    }
    const auto xt = nice_ticks(xmin, xmax, 6), yt = nice_ticks(ymin, ymax, 5);
    const double x0 = xt.front(), x1 = xt.back(), y0 = yt.front(), y1 = yt.back();
    auto px = [&](double x) { return k_left + (x - x0) / (x1 - x0) * pw; };
    auto py = [&](double y) { return k_top + ph - (y - y0) / (y1 - y0) * ph; };
    const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1, ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;

    for (double t : yt)
        svg += fmt::format(
            "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" class=\"grid\"/>"
            "<text x=\"{3:.1f}\" y=\"{4:.1f}\" class=\"ytick\">{5}</text>\n",
            k_left, py(t), k_left + pw, k_left - 6, py(t) + 4, format_tick(t, ystep));
    for (double t : xt)
        svg += fmt::format(
            "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" class=\"grid\"/>"
            "<text x=\"{0:.1f}\" y=\"{3:.1f}\" class=\"xtick\">{4}</text>\n",
            px(t), k_top, k_top + ph, k_top + ph + 16, format_tick(t, xstep));
    // Axes.
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" class=\"axis\"/>"
        "<line x1=\"{0}\" y1=\"{2}\" x2=\"{3}\" y2=\"{2}\" class=\"axis\"/>\n",
        k_left, k_top, k_top + ph, k_left + pw);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"xlabel\">{}</text>\n",
                       k_left + pw / 2, h - 8, html_escape(spec.x_label));
    svg += fmt::format(
        "<text transform=\"translate(14 {:.1f}) rotate(-90)\" class=\"ylabel\">{}</text>\n",
        k_top + ph / 2, html_escape(spec.y_label));

    for (size_t i = 0; i < series.size(); ++i) {
        const char* color = k_palette[i % std::size(k_palette)];
        const auto& pts = series[i].points;
        std::string path;
        for (auto [x, y] : pts) path += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
        svg += fmt::format(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"/>\n", path,
            color);
        if (pts.size() <= 40)
            for (auto [x, y] : pts)
                svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.8\" fill=\"{}\"/>",
                                   px(x), py(y), color);
        // Legend, top right, one row per series.
        double ly = k_top + 12 + 16.0 * static_cast<double>(i);
        double lx = k_left + pw - 150;
        svg += fmt::format(
            "\n<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" "
            "stroke-width=\"3\"/><text x=\"{4:.1f}\" y=\"{5:.1f}\" class=\"legend\">{6}</text>\n",
            lx, ly, lx + 18, color, lx + 24, ly + 4, html_escape(series[i].name));
    }
    return svg + "</svg>\n";
}

}  // namespace loom
