// Helpers for the io tests: a fresh temporary directory per test and a way to
// write raw safetensors images (length + header text + data) byte by byte, so
// corrupt files are built explicitly rather than by our own writer.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

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

// Runs body(i) in n forked processes at once: separate processes, as ranks on
// one machine are, sharing only the file system. body returns 0 when all is
// well; an exception's text or a non-zero status is what failed. Returns,
// per process, "" or that failure.
inline std::vector<std::string> in_processes(int n, const std::function<int(int)>& body) {
    std::vector<std::pair<pid_t, int>> kids;  // pid, read end of its error pipe
    for (int i = 0; i < n; ++i) {
        int fds[2];
        if (::pipe(fds) != 0) return {"pipe failed"};
        const pid_t pid = ::fork();
        if (pid == 0) {
            ::close(fds[0]);
            int rc = 0;
            std::string err;
            try {
                rc = body(i);
            } catch (const std::exception& e) {
                err = e.what();
                rc = 2;
            }
            if (!err.empty() && ::write(fds[1], err.data(), err.size()) < 0) rc = 3;
            ::_exit(rc);
        }
        ::close(fds[1]);
        kids.emplace_back(pid, fds[0]);
    }
    std::vector<std::string> failures;
    for (const auto& [pid, fd] : kids) {
        std::string err;
        char buf[4096];
        for (ssize_t k; (k = ::read(fd, buf, sizeof(buf))) > 0;) err.append(buf, size_t(k));
        ::close(fd);
        int st = 0;
        if (pid < 0 || ::waitpid(pid, &st, 0) != pid) st = -1;
        const bool ok = st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
        failures.push_back(ok ? "" : err.empty() ? "exit status " + std::to_string(st) : err);
    }
    return failures;
}

inline ::testing::AssertionResult contains(const std::string& haystack, const std::string& needle) {
    if (haystack.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "'" << needle << "' not found in: " << haystack;
}

}  // namespace loom::test
