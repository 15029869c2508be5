// POSIX implementation of file_utils.h. Every system call that can fail is
// checked and reported with the path and the OS reason; EINTR and short writes
// are retried.
#include "io/file_utils.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "core/check.h"

namespace loom {

namespace {

std::string os_reason(int err) {
    return std::generic_category().message(err);
}

// fsync of a directory makes a rename in it durable. Some file systems do not
// support it (EINVAL); that is not an error worth failing a save over.
void fsync_dir(const std::string& dir) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    LOOM_CHECK(fd >= 0, "cannot open directory '{}' to sync it: {}", dir, os_reason(errno));
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    LOOM_CHECK(rc == 0 || err == EINVAL || err == EROFS, "cannot sync directory '{}': {}", dir,
               os_reason(err));
}

}  // namespace

std::string parent_dir(const std::string& path) {
    size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

std::string read_file(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    LOOM_CHECK(fd >= 0, "cannot open '{}': {}", path, os_reason(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        LOOM_FAIL("cannot stat '{}': {}", path, os_reason(err));
    }
    if (S_ISDIR(st.st_mode)) {
        ::close(fd);
        LOOM_FAIL("cannot read '{}': it is a directory, expected a file", path);
    }
    std::string bytes;
    if (S_ISREG(st.st_mode)) bytes.reserve(size_t(st.st_size));
    char buf[1 << 16];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int err = errno;
            ::close(fd);
            LOOM_FAIL("cannot read '{}': {}", path, os_reason(err));
        }
        if (n == 0) break;
        bytes.append(buf, size_t(n));
    }
    ::close(fd);
    return bytes;
}

void ensure_dir(const std::string& path) {
    LOOM_CHECK(!path.empty(), "ensure_dir: empty directory path");
    // Walk the prefixes "a", "a/b", "a/b/c" so the error can name the component
    // that failed, not only the full path.
    size_t pos = 0;
    while (pos != std::string::npos) {
        pos = path.find('/', pos + 1);
        std::string prefix = path.substr(0, pos);
        if (prefix.empty() || prefix == "/" || prefix.back() == '/') continue;
        if (::mkdir(prefix.c_str(), 0777) == 0) continue;
        int err = errno;
        // An existing component may report EEXIST or, under a parent we may not
        // write, EACCES: stat decides whether it is a usable directory.
        struct stat st {};
        if (::stat(prefix.c_str(), &st) == 0) {
            LOOM_CHECK(S_ISDIR(st.st_mode),
                       "cannot create directory '{}': '{}' exists and is not a directory", path,
                       prefix);
            continue;
        }
        if (prefix == path) LOOM_FAIL("cannot create directory '{}': {}", path, os_reason(err));
        LOOM_FAIL("cannot create directory '{}': creating '{}' failed: {}", path, prefix,
                  os_reason(err));
    }
}

void check_writable_dir(const std::string& path) {
    ensure_dir(path);
    std::string probe = path + "/.loom_write_probe." + std::to_string(::getpid());
    int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    LOOM_CHECK(fd >= 0, "directory '{}' is not writable: creating '{}' failed: {}", path, probe,
               os_reason(errno));
    ssize_t n;
    do {
        n = ::write(fd, "x", 1);
    } while (n < 0 && errno == EINTR);
    int err = errno;
    ::close(fd);
    ::unlink(probe.c_str());
    LOOM_CHECK(n == 1, "directory '{}' is not writable: writing '{}' failed: {}", path, probe,
               os_reason(err));
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
    AtomicFileWriter w(path);
    w.write(bytes);
    w.commit();
}

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), tmp_path_(path_ + ".tmp." + std::to_string(::getpid())) {
    LOOM_CHECK(!path_.empty(), "cannot write a file with an empty path");
    fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    LOOM_CHECK(fd_ >= 0, "cannot write '{}': creating '{}' failed: {}", path_, tmp_path_,
               os_reason(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t nbytes) {
    LOOM_CHECK(fd_ >= 0 && !committed_, "write to '{}' after commit", path_);
    const char* p = static_cast<const char*>(data);
    while (nbytes > 0) {
        ssize_t n = ::write(fd_, p, nbytes);
        if (n < 0 && errno == EINTR) continue;
        LOOM_CHECK(n > 0, "cannot write '{}' ({} bytes written so far): {}", tmp_path_, written_,
                   n < 0 ? os_reason(errno) : std::string("no progress"));
        p += n;
        nbytes -= size_t(n);
        written_ += size_t(n);
    }
}

void AtomicFileWriter::commit() {
    LOOM_CHECK(fd_ >= 0 && !committed_, "commit of '{}' called twice", path_);
    LOOM_CHECK(::fsync(fd_) == 0, "cannot sync '{}': {}", tmp_path_, os_reason(errno));
    int rc = ::close(fd_);
    fd_ = -1;
    LOOM_CHECK(rc == 0, "cannot close '{}': {}", tmp_path_, os_reason(errno));
    LOOM_CHECK(::rename(tmp_path_.c_str(), path_.c_str()) == 0, "cannot rename '{}' to '{}': {}",
               tmp_path_, path_, os_reason(errno));
    committed_ = true;
    fsync_dir(parent_dir(path_));
}

}  // namespace loom
