// Inline SVG line charts for the HTML run report: axes with "nice" ticks
// (1, 2 or 5 x 10^k), grid lines, axis labels, a legend, one polyline per
// series (markers when a series has few points, e.g. evaluations).
// Plain strings, no scripts or external resources, so the report stays one
// self-contained file. Non-finite points are dropped.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace loom {

struct ChartSeries {
    std::string name;
    std::vector<std::pair<double, double>> points;  // (x, y)
};

struct ChartSpec {
    std::string title;
    std::string x_label;
    std::string y_label;
    std::vector<ChartSeries> series;
    int width = 640;
    int height = 300;
};

std::string svg_line_chart(const ChartSpec& spec);

// Ticks covering [lo, hi] at a 1/2/5 x 10^k step, about `target` of them;
// the first tick <= lo and the last >= hi, so they also bound the axis.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);
// A tick label with as many decimals as the step needs ("0.25", "5e-05").
std::string format_tick(double value, double step);

// &, <, >, " and ' as entities.
std::string html_escape(const std::string& text);

}  // namespace loom
