// Terminal progress for the training loop.
//
// On a terminal (stderr is a TTY) one line is redrawn in place with "\r" and
// an erase-to-end escape, at most ~10 times a second:
//    37%|█████▌         | 370/1000 [01:23<02:21, 4.43 it/s] loss 0.6931 lr 4.20e-05 123 samples/s 15.8k tok/s
// Otherwise (CI logs, files, pipes) plain lines are printed every
// `plain_interval_s` seconds and at the end, so a log is readable and small:
//   step 370/1000 (37%) | 01:23 elapsed, eta 02:21 | loss 0.6931 | lr 4.20e-05 | ...
// Rates and ETA count only the steps run since this bar started, so a resumed
// run does not report a burst of free steps. The clock is injectable so the
// output is tested exactly.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>

namespace loom {

struct ProgressStats {
    double loss = NAN;  // NaN = not shown
    double learning_rate = NAN;
    double samples_per_second = 0;  // 0 = not shown
    double tokens_per_second = 0;
};

class ProgressBar {
public:
    using Clock = std::function<double()>;  // seconds, monotonic

    // tty: std::nullopt = ask isatty(fileno(out)).
    ProgressBar(int64_t total_steps, int64_t start_step = 0, std::FILE* out = stderr,
                std::optional<bool> tty = std::nullopt, double plain_interval_s = 30.0,
                Clock clock = {});

    // After each optimizer step; prints only when due.
    void update(int64_t step, const ProgressStats& stats);
    // A message line that does not get mixed into the bar (evaluation results).
    void message(const std::string& line);
    // The final state, once, with a newline.
    void finish();

    bool is_tty() const { return tty_; }

    // The two line formats, for tests and for callers that log elsewhere.
    // elapsed_s counts from the start of this bar; width is the terminal's.
    std::string tty_line(int64_t step, const ProgressStats& s, double elapsed_s, int width) const;
    std::string plain_line(int64_t step, const ProgressStats& s, double elapsed_s) const;

private:
    void draw(int64_t step, const ProgressStats& s, double now);
    double rate(int64_t step, double elapsed_s) const;  // steps per second

    int64_t total_, start_;
    std::FILE* out_;
    bool tty_;
    double interval_;
    Clock clock_;
    double t0_;
    double last_draw_ = -1e30;
    int64_t last_step_ = -1;
    int64_t drawn_step_ = -1;  // the step of the last line printed
    ProgressStats last_stats_;
    bool drawn_ = false, finished_ = false;
};

// "01:23", "1:02:03".
std::string format_duration(double seconds);
// 15800 -> "15.8k", 2.5e6 -> "2.5M", 123.4 -> "123".
std::string format_rate(double per_second);

}  // namespace loom
