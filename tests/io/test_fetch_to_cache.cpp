// fetch_to_cache() against a real S3-compatible server (s3rver on loopback):
// processes fetching the same prefix at once share one complete copy, a
// changed listing gets a folder of its own without disturbing the old one,
// and a warm cache is reused.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "io/object_store.h"
#include "io/s3_client.h"
#include "s3_test_server.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using test::pattern_bytes;
using test::read_all;

class FetchToCache : public test::S3ServerTest {
  protected:
    // Version folders under the cache for `uri` (remote/<uri hash>/<listing hash>).
    std::vector<std::string> versions() const {
        std::vector<std::string> out;
        const fs::path root = fs::path(path("cache")) / "remote";
        if (!fs::exists(root)) return out;
        for (const auto& by_uri : fs::directory_iterator(root))
            for (const auto& v : fs::directory_iterator(by_uri.path()))
                out.push_back(v.path().string());
        return out;
    }
};

TEST_F(FetchToCache, ProcessesFetchingOnePrefixShareOneCompleteCopy) {
    S3Client c;
    const std::string a = pattern_bytes(400000, 1), b = pattern_bytes(300000, 2);
    c.put(k_bucket, "data/train/a.jsonl", a);
    c.put(k_bucket, "data/train/sub/b.jsonl", b);
    c.put(k_bucket, "data/train/c.csv", "text,label\nx,1\n");
    const std::string src = uri("data/train/");
    const auto failures = test::in_processes(4, [&](int i) {
        const std::string p = fetch_to_cache(src);
        std::ofstream(path("path-" + std::to_string(i))) << p;
        return read_all(p + "/a.jsonl") == a && read_all(p + "/sub/b.jsonl") == b &&
                       read_all(p + "/c.csv") == "text,label\nx,1\n"
                   ? 0
                   : 1;
    });
    for (size_t i = 0; i < failures.size(); ++i) EXPECT_EQ(failures[i], "") << "process " << i;
    const std::string first = read_all(path("path-0"));
    for (int i = 1; i < 4; ++i) EXPECT_EQ(read_all(path("path-" + std::to_string(i))), first);
    EXPECT_EQ(fs::path(first).filename(), "train");
    // One version, with nothing but the copy in it.
    ASSERT_EQ(versions().size(), 1u);
    size_t entries = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(versions()[0])) ++entries;
    EXPECT_EQ(entries, 1u);
}

TEST_F(FetchToCache, ChangedObjectGetsItsOwnFolderAndTheOldCopyStays) {
    S3Client c;
    c.put(k_bucket, "text/lm.jsonl", "{\"text\": \"one\"}\n");
    const std::string first = fetch_to_cache(uri("text/lm.jsonl"));
    EXPECT_EQ(fs::path(first).filename(), "lm.jsonl");
    const auto mtime = fs::last_write_time(first);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // Warm: the same file, not downloaded again.
    EXPECT_EQ(fetch_to_cache(uri("text/lm.jsonl")), first);
    EXPECT_EQ(fs::last_write_time(first), mtime);

    c.put(k_bucket, "text/lm.jsonl", "{\"text\": \"two, longer\"}\n");
    const std::string second = fetch_to_cache(uri("text/lm.jsonl"));
    EXPECT_NE(second, first);
    EXPECT_EQ(read_all(second), "{\"text\": \"two, longer\"}\n");
    EXPECT_EQ(read_all(first), "{\"text\": \"one\"}\n");  // a reader of the old copy keeps it
    EXPECT_EQ(versions().size(), 2u);
}

TEST_F(FetchToCache, MissingPrefixNamesTheUri) {
    const std::string msg = test::error_of([&] { fetch_to_cache(uri("nothing/here/")); });
    EXPECT_TRUE(test::contains(msg, uri("nothing/here/"))) << msg;
    EXPECT_TRUE(versions().empty());
}

}  // namespace
}  // namespace loom
