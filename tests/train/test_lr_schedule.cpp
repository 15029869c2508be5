// LR schedules against values worked out from HF's lr_lambda formulas
// (transformers/optimization.py). Unless noted: base_lr 1, warmup 2, total 10.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numbers>

#include "core/check.h"
#include "optim/lr_schedule.h"

namespace loom {
namespace {

LrSchedule make(LrSchedulerType type, int64_t warmup = 2, int64_t total = 10) {
    LrScheduleArgs a;
    a.type = type;
    a.base_lr = 1.0;
    a.warmup_steps = warmup;
    a.total_steps = total;
    return LrSchedule(a);
}

TEST(LrSchedule, LinearWithWarmup) {
    LrSchedule s = make(LrSchedulerType::linear);
    EXPECT_DOUBLE_EQ(s.factor_at(0), 0.0);  // HF's first update runs at lr 0
    EXPECT_DOUBLE_EQ(s.factor_at(1), 0.5);  // 1 / 2
    EXPECT_DOUBLE_EQ(s.factor_at(2), 1.0);  // (10 - 2) / (10 - 2)
    EXPECT_DOUBLE_EQ(s.factor_at(6), 0.5);  // (10 - 6) / 8
    EXPECT_DOUBLE_EQ(s.factor_at(9), 0.125);
    EXPECT_DOUBLE_EQ(s.factor_at(10), 0.0);
    EXPECT_DOUBLE_EQ(s.factor_at(12), 0.0);  // clamped at 0 past the end
    // No warmup: (10 - step) / 10.
    EXPECT_DOUBLE_EQ(make(LrSchedulerType::linear, 0).factor_at(0), 1.0);
    EXPECT_DOUBLE_EQ(make(LrSchedulerType::linear, 0).factor_at(3), 0.7);
}

TEST(LrSchedule, Cosine) {
    LrSchedule s = make(LrSchedulerType::cosine);
    EXPECT_DOUBLE_EQ(s.factor_at(1), 0.5);
    EXPECT_DOUBLE_EQ(s.factor_at(2), 1.0);  // progress 0: 0.5 (1 + cos 0)
    // progress (4-2)/8 = 0.25: 0.5 (1 + cos(pi * 0.5 * 2 * 0.25)) = 0.5 (1 + cos(pi/4))
    EXPECT_NEAR(s.factor_at(4), 0.5 * (1 + std::sqrt(0.5)), 1e-15);
    EXPECT_NEAR(s.factor_at(6), 0.5, 1e-15);  // cos(pi/2) = 0
    EXPECT_NEAR(s.factor_at(10), 0.0, 1e-15);
    // HF does not clamp progress: past the end the half wave comes back up.
    EXPECT_NEAR(s.factor_at(12), 0.5 * (1 - std::sqrt(0.5)), 1e-15);
}

TEST(LrSchedule, CosineWithRestarts) {
    LrScheduleArgs a;
    a.type = LrSchedulerType::cosine_with_restarts;
    a.base_lr = 1.0;
    a.warmup_steps = 2;
    a.total_steps = 10;
    a.num_cycles = 2.0;
    LrSchedule s(a);
    EXPECT_DOUBLE_EQ(s.factor_at(2), 1.0);
    // progress 0.25: (2 * 0.25) % 1 = 0.5 -> 0.5 (1 + cos(pi/2)) = 0.5
    EXPECT_NEAR(s.factor_at(4), 0.5, 1e-15);
    EXPECT_DOUBLE_EQ(s.factor_at(6), 1.0);   // progress 0.5: the restart
    EXPECT_DOUBLE_EQ(s.factor_at(10), 0.0);  // progress >= 1
    // HF's default num_cycles for this schedule is 1: one full half wave.
    EXPECT_NEAR(make(LrSchedulerType::cosine_with_restarts).factor_at(6), 0.5, 1e-15);
}

TEST(LrSchedule, PolynomialDecay) {
    LrScheduleArgs a;
    a.type = LrSchedulerType::polynomial;
    a.base_lr = 1.0;
    a.warmup_steps = 2;
    a.total_steps = 10;
    a.lr_end = 0.1;
    a.power = 2.0;
    LrSchedule s(a);
    EXPECT_DOUBLE_EQ(s.factor_at(1), 0.5);
    EXPECT_DOUBLE_EQ(s.factor_at(2), 1.0);  // (1 - 0.1) * 1^2 + 0.1
    // pct_remaining 1 - 4/8 = 0.5: 0.9 * 0.25 + 0.1 = 0.325
    EXPECT_DOUBLE_EQ(s.factor_at(6), 0.325);
    EXPECT_DOUBLE_EQ(s.factor_at(10), 0.1);
    EXPECT_DOUBLE_EQ(s.factor_at(11), 0.1);  // past the end: lr_end / lr_init
    // HF defaults (lr_end 1e-7, power 1) at a real learning rate, no warmup:
    // halfway, (5e-5 - 1e-7) * 0.5 + 1e-7 = 2.505e-5.
    LrScheduleArgs d;
    d.type = LrSchedulerType::polynomial;
    d.base_lr = 5e-5;
    d.total_steps = 100;
    EXPECT_NEAR(LrSchedule(d).lr_at(50), 2.505e-5, 1e-18);
    EXPECT_NEAR(LrSchedule(d).lr_at(100), 1e-7, 1e-20);
    // lr_end must sit below the learning rate, as HF requires.
    d.base_lr = 1e-8;
    EXPECT_THROW(LrSchedule{d}, loom::Error);
}

TEST(LrSchedule, ConstantKinds) {
    LrSchedule c = make(LrSchedulerType::constant);
    EXPECT_DOUBLE_EQ(c.factor_at(0), 1.0);  // constant ignores warmup, as in HF
    EXPECT_DOUBLE_EQ(c.factor_at(100), 1.0);
    LrSchedule w = make(LrSchedulerType::constant_with_warmup);
    EXPECT_DOUBLE_EQ(w.factor_at(0), 0.0);
    EXPECT_DOUBLE_EQ(w.factor_at(1), 0.5);
    EXPECT_DOUBLE_EQ(w.factor_at(2), 1.0);
    EXPECT_DOUBLE_EQ(w.factor_at(1000), 1.0);
}

TEST(LrSchedule, LrIsBaseTimesFactorAndArgsAreChecked) {
    LrScheduleArgs a;
    a.base_lr = 3e-4;
    a.warmup_steps = 4;
    a.total_steps = 20;
    LrSchedule s(a);
    EXPECT_DOUBLE_EQ(s.lr_at(2), 3e-4 * 0.5);
    a.warmup_steps = -1;
    EXPECT_THROW(LrSchedule{a}, loom::Error);
}

TEST(LrSchedule, WarmupStepsFromRatio) {
    EXPECT_EQ(warmup_steps_for(1000, 0, 0.06), 60);
    EXPECT_EQ(warmup_steps_for(1001, 0, 0.06), 61);  // ceil(60.06)
    EXPECT_EQ(warmup_steps_for(1000, 7, 0.5), 7);    // explicit steps win
    EXPECT_EQ(warmup_steps_for(1000, 0, 0.0), 0);
}

TEST(LrSchedule, NamesRoundTrip) {
    for (auto name : k_lr_scheduler_names) {
        auto t = lr_scheduler_from_name(name);
        ASSERT_TRUE(t.has_value());
        EXPECT_EQ(lr_scheduler_name(*t), name);
    }
    EXPECT_FALSE(lr_scheduler_from_name("inverse_sqrt").has_value());
}

// Where PyTorch has the same schedule in closed form (no warmup), compare
// with Debian's torch: cosine = CosineAnnealingLR(eta_min 0); polynomial with
// lr_end 0 = PolynomialLR(power); linear = PolynomialLR(power 1).
TEST(LrSchedule, MatchesTorchWhereEquivalent) {
    const char* py = "/usr/bin/python3";
    if (!std::filesystem::exists(py)) GTEST_SKIP() << py << " is not installed";
    auto dir =
        std::filesystem::temp_directory_path() / ("loom_lr_torch_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    {
        std::ofstream out(dir / "ours.txt");
        out.precision(17);
        auto row = [&](LrSchedulerType t, double lr_end, double power) {
            LrScheduleArgs a;
            a.type = t;
            a.base_lr = 0.1;
            a.total_steps = 37;
            a.lr_end = lr_end;
            a.power = power;
            LrSchedule s(a);
            for (int i = 0; i <= 37; ++i) out << s.lr_at(i) << ' ';
            out << '\n';
        };
        row(LrSchedulerType::cosine, 1e-7, 1.0);
        row(LrSchedulerType::polynomial, 0.0, 2.0);
        row(LrSchedulerType::linear, 1e-7, 1.0);
    }
    std::ofstream(dir / "check.py") << R"(import sys
try:
    import torch
except ImportError:
    sys.exit(77)
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
def lrs(make):
    p = torch.nn.Parameter(torch.zeros(1)); o = torch.optim.SGD([p], lr=0.1); s = make(o); out = []
    for _ in range(38):
        out.append(o.param_groups[0]['lr']); o.step(); s.step()
    return out
S = torch.optim.lr_scheduler
refs = [lrs(lambda o: S.CosineAnnealingLR(o, T_max=37, eta_min=0)),
        lrs(lambda o: S.PolynomialLR(o, total_iters=37, power=2.0)),
        lrs(lambda o: S.PolynomialLR(o, total_iters=37, power=1.0))]
worst = max(abs(a - b) for r, ref in zip(rows, refs) for a, b in zip(r, ref))
print("max |loom - torch| =", worst)
sys.exit(0 if worst < 1e-15 else 1)
)";
    std::string cmd =
        std::string(py) + " " + (dir / "check.py").string() + " " + (dir / "ours.txt").string();
    int status = std::system(cmd.c_str());
    std::filesystem::remove_all(dir);
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (rc == 77)
        GTEST_SKIP() << "python3-torch is not installed (scripts/install_deps.sh installs it "
                        "with LOOM_WITH_TORCH=1)";
    EXPECT_EQ(rc, 0);
}

}  // namespace
}  // namespace loom
