// Terminal progress bar (see progress.h).
#include "train/progress.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace loom {

namespace {

constexpr double k_tty_redraw_s = 0.1;

int terminal_width(std::FILE* out) {
    winsize ws{};
    if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) return ws.ws_col;
    return 100;
}

double steady_seconds() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// The bar body in eighth-blocks, `cells` wide (UTF-8).
std::string bar(double fraction, int cells) {
    static const char* const k_parts[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
    fraction = std::clamp(fraction, 0.0, 1.0);
    int eighths = static_cast<int>(fraction * cells * 8);
    std::string out;
    int full = eighths / 8;
    for (int i = 0; i < full; ++i) out += "█";
    if (full < cells) {
        out += k_parts[eighths % 8];
        out.append(static_cast<size_t>(cells - full - (eighths % 8 ? 1 : 0)), ' ');
    }
    return out;
}

// Number of terminal columns a UTF-8 string takes (one per code point here).
int columns(const std::string& s) {
    int n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

std::string extras(const ProgressStats& s, const char* sep) {
    std::string out;
    auto add = [&](const std::string& part) { out += (out.empty() ? "" : sep) + part; };
    if (!std::isnan(s.loss)) add(fmt::format("loss {:.4f}", s.loss));
    if (!std::isnan(s.learning_rate)) add(fmt::format("lr {:.2e}", s.learning_rate));
    if (s.samples_per_second > 0) add(format_rate(s.samples_per_second) + " samples/s");
    if (s.tokens_per_second > 0) add(format_rate(s.tokens_per_second) + " tok/s");
    return out;
}

}  // namespace

std::string format_duration(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) return "?";
    auto t = static_cast<int64_t>(seconds + 0.5);
    if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
    return fmt::format("{:02}:{:02}", t / 60, t % 60);
}

std::string format_rate(double v) {
    if (v >= 1e9) return fmt::format("{:.1f}G", v / 1e9);
    if (v >= 1e6) return fmt::format("{:.1f}M", v / 1e6);
    if (v >= 1e4) return fmt::format("{:.1f}k", v / 1e3);
    if (v >= 100) return fmt::format("{:.0f}", v);
    return fmt::format("{:.3g}", v);
}

ProgressBar::ProgressBar(int64_t total_steps, int64_t start_step, std::FILE* out,
                         std::optional<bool> tty, double plain_interval_s, Clock clock)
    : total_(std::max<int64_t>(total_steps, 1)),
      start_(start_step),
      out_(out),
      tty_(tty.value_or(isatty(fileno(out)) == 1)),
      interval_(plain_interval_s),
      clock_(clock ? std::move(clock) : Clock(steady_seconds)),
      t0_(clock_()) {}

double ProgressBar::rate(int64_t step, double elapsed_s) const {
    int64_t done = step - start_;
    return done > 0 && elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0.0;
}

std::string ProgressBar::tty_line(int64_t step, const ProgressStats& s, double elapsed_s,
                                  int width) const {
    double r = rate(step, elapsed_s);
    double eta = r > 0 ? static_cast<double>(total_ - step) / r : NAN;
    double frac = static_cast<double>(step) / static_cast<double>(total_);
    std::string speed = r >= 1 || r == 0 ? fmt::format("{:.2f} it/s", r)
                                         : fmt::format("{:.2f} s/it", 1.0 / r);
    std::string left = fmt::format("{:3.0f}%|", std::floor(frac * 100));
    std::string right = fmt::format("| {}/{} [{}<{}, {}]", step, total_, format_duration(elapsed_s),
                                    format_duration(eta), speed);
    std::string more = extras(s, " ");
    if (!more.empty()) right += " " + more;
    // The bar takes what is left of the terminal, within 10..40 cells.
    int cells = std::clamp(width - 1 - columns(left) - columns(right), 10, 40);
    std::string line = left + bar(frac, cells) + right;
    // Too narrow even so: drop the bar rather than wrap.
    if (columns(line) > width - 1) line = left.substr(0, left.size() - 1) + right.substr(1);
    return line;
}

std::string ProgressBar::plain_line(int64_t step, const ProgressStats& s, double elapsed_s) const {
    double r = rate(step, elapsed_s);
    double eta = r > 0 ? static_cast<double>(total_ - step) / r : NAN;
    int64_t pct = step * 100 / total_;
    std::string line = fmt::format("step {}/{} ({}%) | {} elapsed, eta {}", step, total_, pct,
                                   format_duration(elapsed_s), format_duration(eta));
    std::string more = extras(s, " | ");
    return more.empty() ? line : line + " | " + more;
}

void ProgressBar::draw(int64_t step, const ProgressStats& s, double now) {
    const double elapsed = now - t0_;
    if (tty_) {
        std::string line = tty_line(step, s, elapsed, terminal_width(out_));
        fmt::print(out_, "\r{}\x1b[K", line);
    } else {
        fmt::print(out_, "{}\n", plain_line(step, s, elapsed));
    }
    std::fflush(out_);
    last_draw_ = now;
    drawn_step_ = step;
    drawn_ = true;
}

void ProgressBar::update(int64_t step, const ProgressStats& stats) {
    last_step_ = step;
    last_stats_ = stats;
    const double now = clock_();
    const double gap = tty_ ? k_tty_redraw_s : interval_;
    // Plain output: the first step, then every interval; the end comes from finish().
    if (!drawn_ || now - last_draw_ >= gap) draw(step, stats, now);
}

void ProgressBar::message(const std::string& line) {
    if (tty_ && drawn_) fmt::print(out_, "\r\x1b[K");
    fmt::print(out_, "{}\n", line);
    if (tty_ && last_step_ >= 0) draw(last_step_, last_stats_, clock_());
    std::fflush(out_);
}

void ProgressBar::finish() {
    if (finished_) return;
    finished_ = true;
    if (last_step_ < 0) return;
    const double now = clock_();
    if (tty_) {
        draw(last_step_, last_stats_, now);
        fmt::print(out_, "\n");
    } else if (drawn_step_ != last_step_) {
        draw(last_step_, last_stats_, now);
    }
    std::fflush(out_);
}

}  // namespace loom
