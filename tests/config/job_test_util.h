// Helpers for the job-file tests: parse text as "job.yaml" in a fixed folder
// (paths unchecked unless asked), and expect an error whose message contains
// every given piece.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "config/job.h"
#include "core/check.h"

namespace loom::test {

inline Job parse_job(const std::string& text, const std::vector<std::string>& overrides = {}) {
    JobParseOptions opts;
    opts.check_paths = false;
    opts.override_base_dir = "/cwd";
    return job_parse(text, "job.yaml", "/jobs", overrides, opts);
}

// Returns the message so a test can check more.
inline std::string expect_error(const std::function<void()>& fn,
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

inline std::string expect_job_error(const std::string& text, const std::vector<std::string>& pieces,
                                    const std::vector<std::string>& overrides = {}) {
    return expect_error([&] { parse_job(text, overrides); }, pieces);
}

// A minimal valid job, for tests that add one section.
inline const char* k_min_job =
    "model: models/bert\n"
    "task: sequence-classification\n"
    "data:\n"
    "  train: data/train.jsonl\n";

}  // namespace loom::test
