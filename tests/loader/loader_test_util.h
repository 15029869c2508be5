// A scratch folder per test for data-reader tests, and an error matcher.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/record.h"

namespace loom::test {

class DataDir : public ::testing::Test {
protected:
    void SetUp() override {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        dir_ = std::filesystem::temp_directory_path() /
               (std::string("loom_loader_") + info->test_suite_name() + "_" + info->name() + "_" +
                std::to_string(::getpid()));
        std::filesystem::remove_all(dir_);
        std::filesystem::create_directories(dir_);
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }

    // Writes `text` byte for byte and returns the path.
    std::string write(const std::string& name, const std::string& text) {
        auto p = dir_ / name;
        std::filesystem::create_directories(p.parent_path());
        std::ofstream(p, std::ios::binary) << text;
        return p.string();
    }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }

    std::filesystem::path dir_;
};

inline ReadOptions classification_options() {
    ReadOptions o;
    o.kind = RecordKind::classification;
    return o;
}

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

}  // namespace loom::test
