// Whole-file reads, crash-safe writes and output-directory checks.
//
// Invariant: a file written through AtomicFileWriter / write_file_atomic either
// appears complete under its real name or not at all. Bytes go to
// "<path>.tmp.<pid>", which is fsynced, renamed over <path>, and then the
// directory is fsynced so the rename itself survives a power cut. A writer that
// is destroyed without commit() (an exception, a full disk) removes its
// temporary file. Every error is a loom::Error naming the path and strerror.
//
// Not here: locking against concurrent writers of the same path (the last
// rename wins, each result complete) and Windows.
#pragma once

#include <string>
#include <string_view>

namespace loom {

// The whole file as bytes. Errors name the path and the OS reason.
std::string read_file(const std::string& path);

// Writes `bytes` to `path` atomically (temporary file, fsync, rename, fsync dir).
void write_file_atomic(const std::string& path, std::string_view bytes);

// mkdir -p. Existing directories are fine; a path component that exists and is
// not a directory, or a mkdir the OS refuses, is an error naming that component.
void ensure_dir(const std::string& path);

// Creates `path` if missing, then proves it is writable by creating and removing
// a probe file. The trainer calls this before step 0 so an unwritable
// output_dir fails in a second rather than after hours of training.
void check_writable_dir(const std::string& path);

// The directory part of a path ("a/b/c.txt" -> "a/b", "c.txt" -> ".").
std::string parent_dir(const std::string& path);

// Streams bytes into "<path>.tmp.<pid>"; commit() makes them appear as <path>.
class AtomicFileWriter {
public:
    explicit AtomicFileWriter(std::string path);
    ~AtomicFileWriter();  // removes the temporary file unless committed
    AtomicFileWriter(const AtomicFileWriter&) = delete;
    AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

    void write(const void* data, size_t nbytes);
    void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
    // fsync + close + rename + fsync of the directory. Call once.
    void commit();

    const std::string& path() const { return path_; }
    const std::string& tmp_path() const { return tmp_path_; }
    size_t bytes_written() const { return written_; }

private:
    std::string path_, tmp_path_;
    int fd_ = -1;
    size_t written_ = 0;
    bool committed_ = false;
};

}  // namespace loom
