// Helpers for the io tests: a fresh temporary directory per test and a way to
// write raw safetensors images (length + header text + data) byte by byte, so
// corrupt files are built explicitly rather than by our own writer.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/check.h"

namespace loom::test {

class TempDirTest : public ::testing::Test {
protected:
    void SetUp() override {
        const char* base = std::getenv("TMPDIR");
        std::string tmpl = std::string(base && *base ? base : "/tmp") + "/loom_io_test_XXXXXX";
        ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << "mkdtemp " << tmpl;
        dir_ = tmpl;
    }
    void TearDown() override {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    std::string path(const std::string& name) const { return dir_ + "/" + name; }

    // Writes bytes verbatim and returns the path.
    std::string write_bytes(const std::string& name, const std::string& bytes) const {
        std::string p = path(name);
        std::ofstream out(p, std::ios::binary);
        out.write(bytes.data(), std::streamsize(bytes.size()));
        EXPECT_TRUE(out.good()) << "writing " << p;
        return p;
    }

    std::string dir_;
};

// 8-byte little-endian length, then `header` as is, then `data`.
inline std::string safetensors_image(const std::string& header, const std::string& data,
                                     uint64_t declared_len = UINT64_MAX) {
    uint64_t n = declared_len == UINT64_MAX ? header.size() : declared_len;
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((n >> (8 * i)) & 0xff);
    return bytes + header + data;
}

inline std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The message of the loom::Error `fn` throws ("" and a test failure if none;
// any other exception type escapes and fails the test).
template <typename Fn>
std::string error_of(Fn&& fn) {
    try {
        fn();
    } catch (const loom::Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "expected a loom::Error";
    return {};
}

inline ::testing::AssertionResult contains(const std::string& haystack, const std::string& needle) {
    if (haystack.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "'" << needle << "' not found in: " << haystack;
}

}  // namespace loom::test
