// fetch_once(): threads and forked processes racing for one target fill it
// once and all see it whole; a filler killed or failing half way leaves
// nothing that passes for the target, and the next caller produces it.
#include "io/fetch_once.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "io_test_util.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class FetchOnce : public TempDirTest {
  protected:
    // What a complete target holds: three files written with pauses between,
    // so racing callers overlap with a fill in progress.
    static void slow_fill(const std::string& tmp, const std::string& tag) {
        fs::create_directories(tmp);
        for (const char* name : {"a", "b", "c"}) {
            std::ofstream(tmp + "/" + name) << tag << ":" << name;
            std::this_thread::sleep_for(20ms);
        }
    }
    static bool whole(const std::string& target) {
        for (const char* name : {"a", "b", "c"}) {
            const std::string text = read_all(target + "/" + name);
            if (text.size() < 2 || !text.ends_with(std::string(":") + name)) return false;
        }
        return true;
    }
    // Nothing but the target itself is left next to it.
    void expect_no_litter(const std::string& target) const {
        EXPECT_FALSE(fs::exists(target + ".part")) << target;
        EXPECT_FALSE(fs::exists(target + ".lock")) << target;
    }
    // Waits up to `limit` for pid; its exit status, or -1 if it is still running.
    static int wait_exit(pid_t pid, std::chrono::milliseconds limit) {
        const auto t0 = std::chrono::steady_clock::now();
        for (;;) {
            int st = 0;
            if (::waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
            if (std::chrono::steady_clock::now() - t0 > limit) return -1;
            std::this_thread::sleep_for(10ms);
        }
    }
};

TEST_F(FetchOnce, ThreadsRacingFillOnceAndAllSeeItWhole) {
    const std::string target = path("cache/v1/train");
    std::atomic<int> fills{0}, incomplete{0}, filled_here{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i)
        threads.emplace_back([&, i] {
            try {
                const bool mine = fetch_once(target, [&](const std::string& tmp) {
                    ++fills;
                    slow_fill(tmp, std::to_string(i));
                });
                filled_here += mine ? 1 : 0;
                if (!whole(target)) ++incomplete;
            } catch (const std::exception&) {
                ++incomplete;
            }
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(fills.load(), 1);
    EXPECT_EQ(filled_here.load(), 1);
    EXPECT_EQ(incomplete.load(), 0);
    expect_no_litter(target);
    // Warm: present, so nothing is called.
    EXPECT_FALSE(fetch_once(target, [&](const std::string&) { ADD_FAILURE() << "filled again"; }));
}

TEST_F(FetchOnce, ProcessesRacingFillOnce) {
    const std::string target = path("cache/train");
    const std::string log = path("fills.log");
    std::vector<pid_t> kids;
    for (int i = 0; i < 6; ++i) {
        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            int rc = 0;
            try {
                fetch_once(target, [&](const std::string& tmp) {
                    std::ofstream(log, std::ios::app) << ::getpid() << "\n";
                    slow_fill(tmp, "p");
                });
                rc = whole(target) ? 0 : 1;
            } catch (...) {
                rc = 2;
            }
            ::_exit(rc);
        }
        kids.push_back(pid);
    }
    for (pid_t k : kids) EXPECT_EQ(wait_exit(k, 30s), 0) << "process " << k;
    std::ifstream in(log);
    int lines = 0;
    for (std::string l; std::getline(in, l);) ++lines;
    EXPECT_EQ(lines, 1) << read_all(log);
    expect_no_litter(target);
}

// The process filling is killed half way; one already waiting takes over,
// and the half-written folder is never published or reused.
TEST_F(FetchOnce, HolderKilledMidwayAWaiterTakesOver) {
    const std::string target = path("cache/train");
    const std::string started = path("a-started");
    const pid_t a = ::fork();
    ASSERT_GE(a, 0);
    if (a == 0) {
        try {
            fetch_once(target, [&](const std::string& tmp) {
                fs::create_directories(tmp);
                std::ofstream(tmp + "/a") << "stale:a";
                std::ofstream(started) << "1";
                std::this_thread::sleep_for(60s);
            });
        } catch (...) {
        }
        ::_exit(3);
    }
    for (int i = 0; i < 1000 && !fs::exists(started); ++i) std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(fs::exists(started)) << "the first filler never started";

    const pid_t b = ::fork();
    ASSERT_GE(b, 0);
    if (b == 0) {
        int rc = 0;
        try {
            const bool mine = fetch_once(target, [&](const std::string& tmp) {
                if (fs::exists(tmp)) rc = 4;  // handed a stale partial folder
                slow_fill(tmp, "fresh");
            });
            if (!mine) rc = 5;
            if (!whole(target) || read_all(target + "/a") != "fresh:a") rc = 6;
        } catch (...) {
            rc = 2;
        }
        ::_exit(rc);
    }
    // B waits while A holds the lock; A's partial folder is not the target.
    EXPECT_EQ(wait_exit(b, 300ms), -1) << "the waiter did not wait";
    EXPECT_FALSE(fs::exists(target));
    EXPECT_TRUE(fs::exists(target + ".part/a"));
    ::kill(a, SIGKILL);
    EXPECT_EQ(wait_exit(a, 10s), 128);
    EXPECT_EQ(wait_exit(b, 30s), 0);
    EXPECT_EQ(read_all(target + "/a"), "fresh:a");
    expect_no_litter(target);
}

// A process killed earlier left its lock file and partial folder behind;
// the next caller, with nobody holding the lock, starts clean.
TEST_F(FetchOnce, LeftoversOfADeadFillerAreNeverTakenForTheTarget) {
    const std::string target = path("cache/train");
    fs::create_directories(target + ".part");
    std::ofstream(target + ".part/a") << "stale:a";
    std::ofstream(target + ".part/b") << "stale:b";
    std::ofstream(target + ".part/c") << "stale:c";
    std::ofstream(target + ".lock") << "999999\n";
    bool clean = false;
    EXPECT_TRUE(fetch_once(target, [&](const std::string& tmp) {
        clean = !fs::exists(tmp);
        slow_fill(tmp, "fresh");
    }));
    EXPECT_TRUE(clean);
    EXPECT_EQ(read_all(target + "/b"), "fresh:b");
    expect_no_litter(target);
}

TEST_F(FetchOnce, FailingFillLeavesNothingAndTheNextCallerFills) {
    const std::string target = path("cache/train");
    const std::string msg = error_of([&] {
        fetch_once(target, [&](const std::string& tmp) {
            fs::create_directories(tmp);
            std::ofstream(tmp + "/a") << "half:a";
            LOOM_FAIL("the store went away after 1 of 3 objects");
        });
    });
    EXPECT_TRUE(contains(msg, "went away"));
    EXPECT_FALSE(fs::exists(target));
    expect_no_litter(target);
    EXPECT_TRUE(fetch_once(target, [&](const std::string& tmp) { slow_fill(tmp, "ok"); }));
    EXPECT_TRUE(whole(target));
}

// Racing threads: whichever gets the lock first fails half way; exactly one
// of the others then fills, and every caller but the failed one succeeds.
TEST_F(FetchOnce, FirstFillerFailsWhileOthersWaitOneOfThemCompletes) {
    const std::string target = path("cache/train");
    std::atomic<int> calls{0}, errors{0}, bad{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 6; ++i)
        threads.emplace_back([&] {
            try {
                fetch_once(target, [&](const std::string& tmp) {
                    if (calls++ == 0) {
                        fs::create_directories(tmp);
                        std::ofstream(tmp + "/a") << "half:a";
                        std::this_thread::sleep_for(100ms);
                        LOOM_FAIL("connection reset");
                    }
                    slow_fill(tmp, "second");
                });
                if (!whole(target)) ++bad;
            } catch (const Error&) {
                ++errors;
            }
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(calls.load(), 2);
    EXPECT_EQ(errors.load(), 1);
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(read_all(target + "/a"), "second:a");
    expect_no_litter(target);
}

TEST_F(FetchOnce, PresentButIncompleteIsFetchedAgain) {
    const std::string target = path("out/checkpoint-4");
    fs::create_directories(target);
    std::ofstream(target + "/model.safetensors") << "half";
    FetchOnceOptions o;
    o.is_complete = [](const std::string& d) { return fs::exists(d + "/manifest.json"); };
    EXPECT_TRUE(fetch_once(
        target,
        [&](const std::string& tmp) {
            fs::create_directories(tmp);
            std::ofstream(tmp + "/manifest.json") << "{}";
        },
        o));
    EXPECT_TRUE(fs::exists(target + "/manifest.json"));
    EXPECT_FALSE(fs::exists(target + "/model.safetensors"));
    // Complete now: kept as it is.
    EXPECT_FALSE(fetch_once(
        target, [&](const std::string&) { ADD_FAILURE() << "refetched"; }, o));
}

TEST_F(FetchOnce, ALongWaitNamesTheHolder) {
    const std::string target = path("cache/train");
    std::atomic<bool> holding{false};
    std::thread holder([&] {
        try {
            fetch_once(target, [&](const std::string& tmp) {
                holding = true;
                std::this_thread::sleep_for(400ms);
                slow_fill(tmp, "h");
            });
        } catch (const std::exception& e) {
            holding = true;
            ADD_FAILURE() << e.what();
        }
    });
    while (!holding) std::this_thread::sleep_for(1ms);
    FetchOnceOptions o;
    o.notice_after_s = 0.05;
    ::testing::internal::CaptureStderr();
    const bool mine = fetch_once(
        target, [&](const std::string&) { ADD_FAILURE() << "filled twice"; }, o);
    const std::string err = ::testing::internal::GetCapturedStderr();
    holder.join();
    EXPECT_FALSE(mine);
    EXPECT_TRUE(contains(err, "waiting for process " + std::to_string(::getpid())));
    EXPECT_TRUE(contains(err, target));
}

TEST_F(FetchOnce, FileTargetsWork) {
    const std::string target = path("cache/v/data.jsonl");
    EXPECT_TRUE(fetch_once(target, [&](const std::string& tmp) { std::ofstream(tmp) << "{}\n"; }));
    EXPECT_EQ(read_all(target), "{}\n");
    expect_no_litter(target);
    const std::string msg = error_of([&] { fetch_once(path("cache/v/empty"), [](auto&) {}); });
    EXPECT_TRUE(contains(msg, "nothing was written"));
}

}  // namespace
}  // namespace loom::test
