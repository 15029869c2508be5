// Progress output with an injected clock: exact plain lines, throttling,
// in-place TTY redraws, resumed runs.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "train/progress.h"

namespace loom {
namespace {

std::string read_all(std::FILE* f) {
    std::fflush(f);
    std::rewind(f);
    std::string out;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
    return out;
}

int columns(const std::string& s) {
    int n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

const ProgressStats k_stats{0.6931, 4.2e-5, 123.4, 15800};

TEST(Progress, Formats) {
    EXPECT_EQ(format_duration(83), "01:23");
    EXPECT_EQ(format_duration(3723), "1:02:03");
    EXPECT_EQ(format_duration(NAN), "?");
    EXPECT_EQ(format_rate(15800), "15.8k");
    EXPECT_EQ(format_rate(2.5e6), "2.5M");
    EXPECT_EQ(format_rate(123.4), "123");
    EXPECT_EQ(format_rate(4.456), "4.46");
}

TEST(Progress, PlainLine) {
    double now = 0;
    ProgressBar bar(1000, 0, stderr, false, 30, [&] { return now; });
    // 370 steps in 83 s: 4.458 it/s, 630 left -> 141.3 s.
    EXPECT_EQ(bar.plain_line(370, k_stats, 83),
              "step 370/1000 (37%) | 01:23 elapsed, eta 02:21 | loss 0.6931 | lr 4.20e-05 | "
              "123 samples/s | 15.8k tok/s");
    EXPECT_EQ(bar.plain_line(0, ProgressStats{}, 0), "step 0/1000 (0%) | 00:00 elapsed, eta ?");
}

TEST(Progress, ResumedRunsCountOnlyNewSteps) {
    ProgressBar bar(1000, 300, stderr, false, 30, [] { return 0.0; });
    // 70 new steps in 10 s: 7 it/s, 630 left -> 90 s.
    EXPECT_NE(bar.plain_line(370, ProgressStats{}, 10).find("eta 01:30"), std::string::npos);
}

TEST(Progress, TtyLineFitsTheTerminal) {
    ProgressBar bar(1000, 0, stderr, true, 30, [] { return 0.0; });
    std::string line = bar.tty_line(370, k_stats, 83, 120);
    EXPECT_TRUE(line.starts_with(" 37%|")) << line;
    EXPECT_NE(line.find("| 370/1000 [01:23<02:21, 4.46 it/s] loss 0.6931 lr 4.20e-05 123 "
                        "samples/s 15.8k tok/s"),
              std::string::npos)
        << line;
    EXPECT_LE(columns(line), 119);
    EXPECT_NE(line.find("█"), std::string::npos);
    // A narrow terminal drops the bar instead of wrapping.
    std::string narrow = bar.tty_line(370, k_stats, 83, 60);
    EXPECT_EQ(narrow.find("█"), std::string::npos);
    // Slow steps read as seconds per step.
    EXPECT_NE(bar.tty_line(2, ProgressStats{}, 8, 120).find("4.00 s/it"), std::string::npos);
    EXPECT_TRUE(bar.tty_line(1000, ProgressStats{}, 10, 120).starts_with("100%|"));
}

TEST(Progress, PlainOutputIsThrottled) {
    std::FILE* f = std::tmpfile();
    ASSERT_NE(f, nullptr);
    double now = 0;
    ProgressBar bar(10, 0, f, false, 30, [&] { return now; });
    const double times[] = {1, 10, 20, 31, 40, 65, 70};
    for (int step = 1; step <= 7; ++step) {
        now = times[step - 1];
        bar.update(step, ProgressStats{});
    }
    bar.finish();
    bar.finish();  // once only
    std::string out = read_all(f);
    std::fclose(f);
    // The first step; step 4 (30 s after it); step 6 (34 s after that); the end.
    std::vector<std::string> lines;
    for (size_t p = 0, q; (q = out.find('\n', p)) != std::string::npos; p = q + 1)
        lines.push_back(out.substr(p, q - p));
    ASSERT_EQ(lines.size(), 4u) << out;
    EXPECT_TRUE(lines[0].starts_with("step 1/10 "));
    EXPECT_TRUE(lines[1].starts_with("step 4/10 "));
    EXPECT_TRUE(lines[2].starts_with("step 6/10 "));
    EXPECT_TRUE(lines[3].starts_with("step 7/10 "));
    EXPECT_EQ(out.find('\r'), std::string::npos);
}

TEST(Progress, TtyRedrawsInPlace) {
    std::FILE* f = std::tmpfile();
    ASSERT_NE(f, nullptr);
    double now = 0;
    ProgressBar bar(4, 0, f, true, 30, [&] { return now; });
    for (int step = 1; step <= 4; ++step) {
        now += 1;
        bar.update(step, ProgressStats{});
    }
    bar.message("eval_loss 0.42");
    bar.finish();
    std::string out = read_all(f);
    std::fclose(f);
    EXPECT_GE(std::count(out.begin(), out.end(), '\r'), 4);
    EXPECT_NE(out.find("\x1b[K"), std::string::npos);
    // The message gets its own line, then the bar comes back; one final newline.
    EXPECT_NE(out.find("\r\x1b[Keval_loss 0.42\n\r"), std::string::npos) << out;
    EXPECT_TRUE(out.ends_with("\n"));
    EXPECT_NE(out.rfind("4/4"), std::string::npos);
}

}  // namespace
}  // namespace loom
