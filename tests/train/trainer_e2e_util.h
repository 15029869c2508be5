// Helpers for the trainer end-to-end tests: a scratch folder per test, job
// files built from the tiny configs and data in tests/data/train, and an
// error matcher. Every run uses one thread, so the suite stays fast on a busy
// 2-core machine and results do not depend on scheduling.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "config/job.h"
#include "core/check.h"
#include "core/runtime.h"
#include "train/trainer.h"

namespace loom::test {

inline std::string data_path(const std::string& rel) {
    return std::string(LOOM_TEST_DATA_DIR) + "/" + rel;
}

inline const char* k_wordpiece = "tokenizers/wordpiece-multilingual-cased/tokenizer.json";
inline const char* k_unigram = "tokenizers/unigram-albert-style/tokenizer.json";

class TrainDir : public ::testing::Test {
  protected:
    void SetUp() override {
        runtime_init({1});
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        dir_ = std::filesystem::temp_directory_path() /
               (std::string("loom_train_") + info->test_suite_name() + "_" + info->name() + "_" +
                std::to_string(::getpid()));
        std::filesystem::remove_all(dir_);
        std::filesystem::create_directories(dir_);
    }
    void TearDown() override {
        if (!HasFailure()) std::filesystem::remove_all(dir_);
    }

    std::string path(const std::string& rel) const { return (dir_ / rel).string(); }

    std::string write(const std::string& rel, const std::string& text) const {
        const std::string p = path(rel);
        std::ofstream(p, std::ios::binary) << text;
        return p;
    }

    // A job for `task` on the tiny data; `extra` is appended to hyperparameters.
    std::string job_text(const std::string& task, const std::string& out,
                         const std::string& extra = "", const std::string& data_extra = "") const {
        std::string config = data_path("train/tiny-bert.json");
        std::string tok = data_path(k_wordpiece);
        std::string train, eval;
        if (task == "sequence-classification") {
            train = data_path("train/cls_train.jsonl");
            eval = data_path("train/cls_eval.jsonl");
        } else if (task == "question-answering") {
            train = data_path("train/qa_train.jsonl");
            eval = data_path("train/qa_eval.jsonl");
        } else {
            train = data_path("train/lm_train.jsonl");
            eval = data_path("train/lm_eval.jsonl");
        }
        if (task == "causal-lm") {
            config = data_path("train/tiny-gpt2.json");
            tok = data_path(k_unigram);
        }
        std::string hp;
        // Defaults, unless `extra` sets the key itself.
        const std::pair<const char*, const char*> defaults[] = {
            {"per_device_train_batch_size", "16"},
            {"per_device_eval_batch_size", "16"},
            {"learning_rate", "1.0e-2"},
            {"logging_steps", "1"},
            {"save_strategy", "'no'"}};
        for (const auto& [k, v] : defaults)
            if (extra.find(std::string("  ") + k + ":") == std::string::npos)
                hp += std::string("  ") + k + ": " + v + "\n";
        std::string data =
            "\n  max_seq_length: " +
            std::string(task == "question-answering" ? "48\n  doc_stride: 16" : "32") + "\n";
        return "model:\n  config: " + config + "\n  tokenizer: " + tok + "\ntask: " + task +
               "\ndata:\n  train: " + train + (eval_ ? "\n  eval: " + eval : "") + data +
               data_extra + "hyperparameters:\n  output_dir: " + path(out) + "\n" + hp + extra;
    }

    Job job(const std::string& text, const std::vector<std::string>& overrides = {}) const {
        return job_parse(text, path("job.yaml"), dir_.string(), overrides);
    }

    static TrainerOptions quiet() {
        TrainerOptions o;
        o.quiet = true;
        o.handle_signals = false;
        return o;
    }

    std::filesystem::path dir_;
    bool eval_ = true;  // include the eval channel in job_text
};

// Runs fn and expects a loom::Error containing every piece; returns the message.
inline std::string expect_train_error(const std::function<void()>& fn,
                                      const std::vector<std::string>& pieces) {
    try {
        fn();
    } catch (const loom::Error& e) {
        std::string msg = e.what();
        for (const auto& p : pieces)
            EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
        return msg;
    }
    ADD_FAILURE() << "expected an error containing '" << (pieces.empty() ? "" : pieces[0]) << "'";
    return "";
}

// Every parameter of a trainer's model, flat.
inline std::vector<float> params_of(Trainer& tr) {
    const ParamTable& t = tr.model().params();
    return std::vector<float>(t.params_data(), t.params_data() + t.flat_numel());
}

inline double mean(const std::vector<double>& v, size_t begin, size_t end) {
    double s = 0;
    for (size_t i = begin; i < end; ++i) s += v[i];
    return s / double(end - begin);
}

}  // namespace loom::test
