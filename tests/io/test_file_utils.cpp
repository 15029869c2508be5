// file_utils: reads report the path and reason, atomic writes leave either the
// old or the new file and no temporaries, directories are created and probed.
#include <sys/stat.h>

#include "io/file_utils.h"
#include "io_test_util.h"

namespace loom {
namespace {

using test::contains;
using test::error_of;

class FileUtils : public test::TempDirTest {};

TEST_F(FileUtils, ReadFileRoundTripsBinaryBytes) {
    std::string bytes("a\0b\xff\n", 5);
    bytes += std::string(200000, 'z');  // larger than one read() chunk
    write_file_atomic(path("f.bin"), bytes);
    EXPECT_EQ(read_file(path("f.bin")), bytes);
    write_file_atomic(path("empty"), "");
    EXPECT_EQ(read_file(path("empty")), "");
}

TEST_F(FileUtils, ReadFileErrorsNameThePathAndReason) {
    std::string msg = error_of([&] { read_file(path("missing.json")); });
    EXPECT_TRUE(contains(msg, path("missing.json")));
    EXPECT_TRUE(contains(msg, "No such file or directory"));
    msg = error_of([&] { read_file(dir_); });
    EXPECT_TRUE(contains(msg, dir_));
    EXPECT_TRUE(contains(msg, "is a directory"));
}

TEST_F(FileUtils, AtomicWriteReplacesWithoutLeftovers) {
    write_file_atomic(path("cfg.json"), "old");
    write_file_atomic(path("cfg.json"), "new contents");
    EXPECT_EQ(read_file(path("cfg.json")), "new contents");
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
        ++n;
        EXPECT_EQ(e.path().filename(), "cfg.json");
    }
    EXPECT_EQ(n, 1);
}

TEST_F(FileUtils, AbandonedWriterKeepsTheOldFileAndRemovesItsTemporary) {
    write_file_atomic(path("state.bin"), "complete old state");
    std::string tmp;
    {
        AtomicFileWriter w(path("state.bin"));
        tmp = w.tmp_path();
        w.write("half of the new st");
        EXPECT_TRUE(std::filesystem::exists(tmp));
        EXPECT_EQ(read_file(path("state.bin")), "complete old state");
        // destroyed without commit(): what an exception mid-save does
    }
    EXPECT_FALSE(std::filesystem::exists(tmp));
    EXPECT_EQ(read_file(path("state.bin")), "complete old state");
    EXPECT_TRUE(contains(tmp, path("state.bin") + ".tmp."));
}

TEST_F(FileUtils, WriterErrorsNameTheTarget) {
    std::string msg = error_of([&] { write_file_atomic(path("no/dir/x.txt"), "x"); });
    EXPECT_TRUE(contains(msg, path("no/dir/x.txt")));
    EXPECT_TRUE(contains(msg, "No such file or directory"));
    AtomicFileWriter w(path("once.txt"));
    w.write("x");
    w.commit();
    EXPECT_EQ(w.bytes_written(), 1u);
    msg = error_of([&] { w.commit(); });
    EXPECT_TRUE(contains(msg, "once.txt"));
}

TEST_F(FileUtils, EnsureDirCreatesNestedAndAcceptsExisting) {
    const std::string deep = path("a/b//c/");
    ensure_dir(deep);
    EXPECT_TRUE(std::filesystem::is_directory(path("a/b/c")));
    ensure_dir(deep);  // again: fine
    ensure_dir(path("a"));
}

TEST_F(FileUtils, EnsureDirNamesTheComponentThatIsAFile) {
    write_file_atomic(path("file"), "x");
    std::string msg = error_of([&] { ensure_dir(path("file/sub/dir")); });
    EXPECT_TRUE(contains(msg, path("file/sub/dir")));
    EXPECT_TRUE(contains(msg, path("file") + "' exists and is not a directory"));
    msg = error_of([&] { ensure_dir(""); });
    EXPECT_TRUE(contains(msg, "empty"));
}

TEST_F(FileUtils, CheckWritableDir) {
    check_writable_dir(path("out/run1"));
    EXPECT_TRUE(std::filesystem::is_directory(path("out/run1")));
    EXPECT_TRUE(std::filesystem::is_empty(path("out/run1"))) << "the probe file must be removed";

    write_file_atomic(path("blocker"), "x");
    std::string msg = error_of([&] { check_writable_dir(path("blocker/out")); });
    EXPECT_TRUE(contains(msg, path("blocker/out")));

    // Permission bits do not stop root, so only check them as another user.
    if (::geteuid() != 0) {
        ensure_dir(path("ro"));
        ASSERT_EQ(::chmod(path("ro").c_str(), 0555), 0);
        msg = error_of([&] { check_writable_dir(path("ro")); });
        EXPECT_TRUE(contains(msg, "is not writable"));
        EXPECT_TRUE(contains(msg, "Permission denied"));
        ::chmod(path("ro").c_str(), 0755);
    }
}

TEST(FileUtilsPure, ParentDir) {
    EXPECT_EQ(parent_dir("a/b/c.txt"), "a/b");
    EXPECT_EQ(parent_dir("c.txt"), ".");
    EXPECT_EQ(parent_dir("/c.txt"), "/");
    EXPECT_EQ(parent_dir("/x/y"), "/x");
}

}  // namespace
}  // namespace loom
