// A real S3-compatible server on loopback for the s3:// tests: s3rver (npm),
// installed on first use by scripts/install_npm_tool.sh into tests/s3rver/, and
// s3cmd (Debian) as an independent client to put and fetch objects.
//
// Each test gets its own server process, data folder, port and bucket
// "loom-test", and the AWS_* variables that point Loom at it (s3rver's fixed
// key S3RVER / S3RVER). Retries are shortened (LOOM_REMOTE_*) so fault tests
// finish in seconds. Without node the test is skipped with the reason printed.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "io_test_util.h"

namespace loom::test {

inline std::string source_root() {
    return std::filesystem::canonical(std::filesystem::path(LOOM_TEST_DATA_DIR) / "../..").string();
}

// The output of a shell command and its exit status.
inline int run_command(const std::string& cmd, std::string* out) {
    FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
    if (!p) return -1;
    char buf[4096];
    std::string s;
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) s.append(buf, n);
    const int st = ::pclose(p);
    if (out) *out = s;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

inline int free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
}

inline bool port_open(int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(uint16_t(port));
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
}

class S3ServerTest : public TempDirTest {
  protected:
    static constexpr const char* k_bucket = "loom-test";

    void SetUp() override {
        TempDirTest::SetUp();
        std::string out;
        const int rc = run_command("bash " + source_root() +
                                       "/scripts/install_npm_tool.sh s3rver "
                                       "node_modules/s3rver/bin/s3rver.js",
                                   &out);
        if (rc == 3) GTEST_SKIP() << "s3rver unavailable: " << out;
        ASSERT_EQ(rc, 0) << "installing s3rver failed:\n" << out;
        // The script's last line is the server's path (npm may talk before it).
        while (!out.empty() && out.back() == '\n') out.pop_back();
        server_js_ = out.substr(
            out.find_last_of('\n') == std::string::npos ? 0 : out.find_last_of('\n') + 1);
        port_ = free_port();
        std::filesystem::create_directories(path("s3data"));
        start();
        endpoint_ = "http://127.0.0.1:" + std::to_string(port_);
        ::setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
        ::setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
        ::unsetenv("AWS_SESSION_TOKEN");
        ::unsetenv("AWS_PROFILE");
        ::setenv("AWS_REGION", "us-east-1", 1);
        ::setenv("AWS_ENDPOINT_URL", endpoint_.c_str(), 1);
        ::setenv("LOOM_REMOTE_MAX_ATTEMPTS", "4", 1);
        ::setenv("LOOM_REMOTE_RETRY_BASE_MS", "100", 1);
        ::setenv("LOOM_CACHE_DIR", path("cache").c_str(), 1);
        std::ofstream cfg(path("s3cfg"));
        cfg << "[default]\naccess_key = S3RVER\nsecret_key = S3RVER\nhost_base = 127.0.0.1:"
            << port_ << "\nhost_bucket = 127.0.0.1:" << port_
            << "\nuse_https = False\nsignature_v2 = False\n";
    }
    void TearDown() override {
        stop();
        TempDirTest::TearDown();
    }

    void start() {
        pid_ = ::fork();
        if (pid_ == 0) {
            const std::string port = std::to_string(port_);
            const std::string data = path("s3data");
            const std::string log = path("s3rver.log");
            FILE* f = std::freopen(log.c_str(), "a", stdout);
            (void)f;
            ::dup2(::fileno(stdout), 2);
            // s3rver makes ListObjectsV2 continuation tokens with DES, which
            // OpenSSL 3 keeps in its legacy provider.
            ::execlp("node", "node", "--openssl-legacy-provider", server_js_.c_str(), "-d",
                     data.c_str(), "-a", "127.0.0.1", "-p", port.c_str(), "--silent",
                     "--configure-bucket", k_bucket, (char*)nullptr);
            ::_exit(127);
        }
        const auto t0 = std::chrono::steady_clock::now();
        while (!port_open(port_)) {
            int st = 0;
            ASSERT_EQ(::waitpid(pid_, &st, WNOHANG), 0) << "s3rver exited at start:\n"
                                                        << read_all(path("s3rver.log"));
            ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30))
                << "s3rver did not open port " << port_;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
    }
    void stop() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGTERM);
        int st = 0;
        ::waitpid(pid_, &st, 0);
        pid_ = -1;
    }

    // s3cmd with this server's settings; returns its output, failing the test on error.
    std::string s3cmd(const std::string& args) {
        std::string out;
        const int rc = run_command("s3cmd -c " + path("s3cfg") + " " + args, &out);
        EXPECT_EQ(rc, 0) << "s3cmd " << args << ":\n" << out;
        return out;
    }
    static bool have_s3cmd() { return run_command("command -v s3cmd", nullptr) == 0; }

    std::string uri(const std::string& key) const {
        return std::string("s3://") + k_bucket + "/" + key;
    }

    std::string server_js_, endpoint_;
    int port_ = 0;
    pid_t pid_ = -1;
};

// Deterministic pseudo-random bytes (a test's payload).
inline std::string pattern_bytes(size_t n, uint32_t seed) {
    std::string s(n, '\0');
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        s[i] = char(x & 0xff);
    }
    return s;
}

}  // namespace loom::test
