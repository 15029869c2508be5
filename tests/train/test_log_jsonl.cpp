// metrics.jsonl: HF log_history names, strict JSON, resume truncation.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "train/log_jsonl.h"
#include "train_test_util.h"

namespace loom {
namespace {

class LogJsonl : public test::TempDir {};

TEST_F(LogJsonl, WritesHfLogHistoryLines) {
    {
        JsonlLogger log((dir_ / "out").string());
        log.log(train_log_entry(10, 0.25, 0.6931, 1.5, 4.5e-5));
        log.log(train_log_entry(20, 0.5, 0.5, -1, 4e-5));  // grad_norm not computed
        log.log(eval_log_entry(20, 0.5, {{"loss", 0.45}, {"accuracy", 0.8125}, {"eval_f1", 0.79}}));
    }
    std::string text = slurp(dir_ / "out" / "metrics.jsonl");
    std::istringstream lines(text);
    std::string l1, l2, l3;
    std::getline(lines, l1);
    std::getline(lines, l2);
    std::getline(lines, l3);
    // Key order as HF's Trainer logs them.
    EXPECT_EQ(
        l1,
        R"({"loss": 0.6931, "grad_norm": 1.5, "learning_rate": 4.5e-05, "epoch": 0.25, "step": 10})");
    EXPECT_EQ(l2, R"({"loss": 0.5, "learning_rate": 4e-05, "epoch": 0.5, "step": 20})");
    EXPECT_EQ(
        l3,
        R"({"eval_loss": 0.45, "eval_accuracy": 0.8125, "eval_f1": 0.79, "epoch": 0.5, "step": 20})");
    // Each line is valid JSON to a strict parser.
    auto j = nlohmann::json::parse(l1);
    EXPECT_DOUBLE_EQ(j["learning_rate"].get<double>(), 4.5e-5);
}

TEST_F(LogJsonl, NonFiniteValuesAreNullAndRoundTrip) {
    LogEntry e;
    e.set("loss", NAN);
    e.set("grad_norm", INFINITY);
    e.set("step", 3);
    e.set("learning_rate", 1.0 / 3.0);
    EXPECT_EQ(log_entry_to_json(e).substr(0, 33), R"({"loss": null, "grad_norm": null,)");
    {
        JsonlLogger log(dir_.string());
        log.log(e);
    }
    auto back = read_metrics_jsonl((dir_ / "metrics.jsonl").string());
    ASSERT_EQ(back.size(), 1u);
    EXPECT_FALSE(back[0].has("loss"));
    EXPECT_EQ(back[0].get("step"), 3.0);
    EXPECT_EQ(back[0].get("learning_rate"), 1.0 / 3.0);  // shortest repr reads back exactly
    // set() replaces in place.
    e.set("step", 4);
    EXPECT_EQ(e.values.size(), 4u);
    EXPECT_EQ(e.get("step"), 4.0);
}

TEST_F(LogJsonl, ResumeDropsLinesPastTheCheckpoint) {
    {
        JsonlLogger log(dir_.string());
        for (int s = 10; s <= 50; s += 10) log.log(train_log_entry(s, s / 100.0, 1.0, 1.0, 1e-5));
    }
    {
        JsonlLogger log(dir_.string(), /*resume_step=*/30);
        log.log(train_log_entry(40, 0.4, 0.9, 1.0, 1e-5));
    }
    auto back = read_metrics_jsonl((dir_ / "metrics.jsonl").string());
    ASSERT_EQ(back.size(), 4u);
    EXPECT_EQ(back[2].get("step"), 30.0);
    EXPECT_EQ(back[3].get("loss"), 0.9);
    // A fresh run starts a fresh file.
    { JsonlLogger log(dir_.string()); }
    EXPECT_TRUE(read_metrics_jsonl((dir_ / "metrics.jsonl").string()).empty());
}

TEST_F(LogJsonl, ReaderNamesBadLines) {
    std::ofstream(dir_ / "m.jsonl") << "{\"step\": 1}\n[1]\n";
    try {
        read_metrics_jsonl((dir_ / "m.jsonl").string());
        FAIL() << "expected an error";
    } catch (const loom::Error& e) {
        EXPECT_NE(std::string(e.what()).find("m.jsonl:2"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace loom
