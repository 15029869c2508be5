// Once-per-machine production of a shared file or folder (fetch_once.h).
#include "io/fetch_once.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <thread>

#include "core/check.h"
#include "io/file_utils.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

std::string os_reason(int err) {
    return std::generic_category().message(err);
}

bool present(const std::string& target, const FetchOnceOptions& o) {
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(target, ec))) return false;
    return !o.is_complete || o.is_complete(target);
}

// The pid the holder wrote into the lock file, for the waiting notice.
std::string holder_of(int fd) {
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    std::string s = n > 0 ? std::string(buf, size_t(n)) : std::string();
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s.empty() ? "?" : s;
}

// The exclusive lock, held while this lives. The path is unlinked before the
// descriptor closes, so no later caller can lock this (now nameless) file.
class HeldLock {
  public:
    HeldLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
    ~HeldLock() {
        ::unlink(path_.c_str());
        ::close(fd_);
    }
    HeldLock(const HeldLock&) = delete;
    HeldLock& operator=(const HeldLock&) = delete;

  private:
    int fd_;
    std::string path_;
};

// Locks lock_path and returns its descriptor, or -1 once `target` turned up
// complete while waiting (its producer published it).
int acquire(const std::string& lock_path, const std::string& target, const FetchOnceOptions& o) {
    const auto t0 = std::chrono::steady_clock::now();
    bool noticed = false;
    int pause_ms = 2;
    for (;;) {
        const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        LOOM_CHECK(fd >= 0, "cannot open the lock file '{}' (fetching {}): {}", lock_path, target,
                   os_reason(errno));
        // Polled rather than blocking, so a waiter can leave as soon as the
        // target is published and can say whom it waits for.
        while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int err = errno;
            if (err == EINTR) continue;
            if (err != EWOULDBLOCK) {
                ::close(fd);
                LOOM_FAIL("cannot lock '{}' (fetching {}): {}", lock_path, target, os_reason(err));
            }
            if (present(target, o)) {
                ::close(fd);
                return -1;
            }
            const double waited =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (!noticed && waited >= o.notice_after_s) {
                noticed = true;
                fmt::print(stderr,
                           "loom: waiting for process {} to finish fetching {} ({:.0f} s)\n",
                           holder_of(fd), target, waited);
                std::fflush(stderr);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
            pause_ms = std::min(pause_ms * 2, 100);
        }
        struct stat held {};
        struct stat named {};
        if (::fstat(fd, &held) == 0 && ::stat(lock_path.c_str(), &named) == 0 &&
            held.st_dev == named.st_dev && held.st_ino == named.st_ino)
            return fd;
        // The previous holder unlinked this file before letting go; the lock
        // that counts is on whatever the path names now.
        ::close(fd);
    }
}

}  // namespace

bool fetch_once(const std::string& target, const std::function<void(const std::string& tmp)>& fill,
                const FetchOnceOptions& options) {
    LOOM_CHECK(fs::path(target).has_filename(), "fetch_once: '{}' does not name a file or folder",
               target);
    if (present(target, options)) return false;
    ensure_dir(parent_dir(target));
    const std::string lock_path = target + ".lock";
    const std::string part = target + ".part";
    const int fd = acquire(lock_path, target, options);
    if (fd < 0) return false;
    HeldLock lock(fd, lock_path);
    const std::string pid = fmt::format("{}\n", ::getpid());
    if (::ftruncate(fd, 0) == 0) {
        [[maybe_unused]] const ssize_t w = ::pwrite(fd, pid.data(), pid.size(), 0);
    }
    if (present(target, options)) return false;

    std::error_code ec;
    // A ".part" seen while holding the lock was left by a holder that died.
    fs::remove_all(part, ec);
    LOOM_CHECK(!ec, "cannot remove the partial download '{}' a stopped process left: {}", part,
               ec.message());
    if (fs::exists(fs::symlink_status(target, ec))) {
        fs::remove_all(target, ec);
        LOOM_CHECK(!ec, "cannot remove the incomplete '{}' to fetch it again: {}", target,
                   ec.message());
    }
    try {
        fill(part);
    } catch (...) {
        std::error_code ignored;
        fs::remove_all(part, ignored);
        throw;
    }
    LOOM_CHECK(fs::exists(fs::symlink_status(part, ec)), "fetching {}: nothing was written to '{}'",
               target, part);
    fs::rename(part, target, ec);
    LOOM_CHECK(!ec, "cannot move '{}' to '{}': {}", part, target, ec.message());
    return true;
}

}  // namespace loom
