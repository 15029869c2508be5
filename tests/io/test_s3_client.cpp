// S3Client against a real S3-compatible server (s3rver on loopback), with
// s3cmd as the independent client: what one writes the other reads, listing
// follows pages, multipart uploads reassemble, and failures (404, 403 from a
// wrong key, a stopped server) give errors naming the URI, the status and the
// credentials used, never the secret.
#include <chrono>
#include <thread>

#include "io/byte_source.h"
#include "io/s3_client.h"
#include "s3_test_server.h"

namespace loom {
namespace {

using test::contains;
using test::error_of;
using test::pattern_bytes;

class S3Client_ : public test::S3ServerTest {};

TEST_F(S3Client_, ObjectsPutByS3cmdReadBackWholeAndByRange) {
    if (!have_s3cmd()) GTEST_SKIP() << "s3cmd is not installed (Debian: apt-get install s3cmd)";
    const std::string bytes = pattern_bytes(300000, 1);
    write_bytes("src.bin", bytes);
    s3cmd("put " + path("src.bin") + " '" + uri("dir/with space/a.bin") + "'");
    S3Client c;
    EXPECT_EQ(c.get(k_bucket, "dir/with space/a.bin"), bytes);
    auto info = c.head(k_bucket, "dir/with space/a.bin");
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->size, bytes.size());
    std::string part(1000, '\0');
    c.get_range(k_bucket, "dir/with space/a.bin", 123457, part.size(), part.data());
    EXPECT_EQ(part, bytes.substr(123457, 1000));
    EXPECT_FALSE(c.head(k_bucket, "dir/missing.bin").has_value());
}

TEST_F(S3Client_, OurUploadsReadBackWithS3cmdIncludingMultipart) {
    if (!have_s3cmd()) GTEST_SKIP() << "s3cmd is not installed (Debian: apt-get install s3cmd)";
    S3Options o;
    o.multipart_threshold_bytes = 6u << 20;
    o.part_bytes = 5u << 20;  // S3's minimum part size
    S3Client c(resolve_aws_settings(), RetryPolicy::from_environment(), o);
    const std::string small = pattern_bytes(1000, 2), big = pattern_bytes((12u << 20) + 17, 3);
    c.put(k_bucket, "up/small.bin", small);
    write_bytes("big.bin", big);
    c.put_file(k_bucket, "up/big.bin", path("big.bin"));  // three parts: 5 + 5 + 2 MiB
    s3cmd("get " + uri("up/small.bin") + " " + path("small.out"));
    s3cmd("get " + uri("up/big.bin") + " " + path("big.out"));
    EXPECT_EQ(test::read_all(path("small.out")), small);
    EXPECT_TRUE(test::read_all(path("big.out")) == big) << "multipart object differs";
    EXPECT_EQ(c.get_to_file(k_bucket, "up/big.bin", path("big.again")), big.size());
    EXPECT_TRUE(test::read_all(path("big.again")) == big);
}

TEST_F(S3Client_, ListFollowsEveryPageAndDeleteRemoves) {
    S3Options o;
    o.list_page_keys = 2;  // 5 objects = 3 pages
    S3Client c(resolve_aws_settings(), RetryPolicy::from_environment(), o);
    for (int i = 0; i < 5; ++i)
        c.put(k_bucket, "ls/k" + std::to_string(i), std::string(size_t(i), 'x'));
    c.put(k_bucket, "other/k", "y");
    auto all = c.list(k_bucket, "ls/");
    ASSERT_EQ(all.size(), 5u);
    for (int i = 0; i < 5; ++i) {
        EXPECT_EQ(all[size_t(i)].key, "ls/k" + std::to_string(i));
        EXPECT_EQ(all[size_t(i)].size, uint64_t(i));
    }
    c.remove(k_bucket, "ls/k3");
    c.remove(k_bucket, "ls/never-there");  // not an error
    all = c.list(k_bucket, "ls/");
    EXPECT_EQ(all.size(), 4u);
    for (const auto& x : all) EXPECT_NE(x.key, "ls/k3");
}

TEST_F(S3Client_, MissingObjectNamesTheUriAndStatus) {
    S3Client c;
    const std::string msg = error_of([&] { c.get(k_bucket, "nope/x.jsonl"); });
    EXPECT_TRUE(contains(msg, "s3://loom-test/nope/x.jsonl")) << msg;
    EXPECT_TRUE(contains(msg, "HTTP 404")) << msg;
    EXPECT_TRUE(contains(msg, "NoSuchKey")) << msg;
}

TEST_F(S3Client_, ForbiddenNamesTheCredentialsButNeverTheSecret) {
    S3Client(resolve_aws_settings()).put(k_bucket, "secret/data.bin", "abc");
    ::setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGKEY000", 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", "wr0ngS3cretValue/xyz", 1);
    S3Client c;
    const std::string msg = error_of([&] { c.get(k_bucket, "secret/data.bin"); });
    EXPECT_TRUE(contains(msg, "s3://loom-test/secret/data.bin")) << msg;
    EXPECT_TRUE(contains(msg, "HTTP 403")) << msg;
    EXPECT_TRUE(contains(msg, "AKIAWRONGKEY000")) << msg;
    EXPECT_TRUE(contains(msg, "AWS_ACCESS_KEY_ID")) << msg;  // where the key came from
    EXPECT_FALSE(contains(msg, "wr0ngS3cretValue")) << msg;
}

TEST_F(S3Client_, ForbiddenNamesTheProfileWhenCredentialsComeFromAFile) {
    ::unsetenv("AWS_ACCESS_KEY_ID");
    ::unsetenv("AWS_SECRET_ACCESS_KEY");
    write_bytes("credentials",
                "[training]\naws_access_key_id = AKIAFROMFILE\n"
                "aws_secret_access_key = fileSecretNotShown\n");
    ::setenv("AWS_SHARED_CREDENTIALS_FILE", path("credentials").c_str(), 1);
    ::setenv("AWS_CONFIG_FILE", path("no-config").c_str(), 1);
    ::setenv("AWS_PROFILE", "training", 1);
    S3Client c;
    const std::string msg = error_of([&] { c.head(k_bucket, "x"); });
    ::unsetenv("AWS_PROFILE");
    ::unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    EXPECT_TRUE(contains(msg, "HTTP 403")) << msg;
    EXPECT_TRUE(contains(msg, "AKIAFROMFILE")) << msg;
    EXPECT_TRUE(contains(msg, "profile 'training' in " + path("credentials"))) << msg;
    EXPECT_FALSE(contains(msg, "fileSecretNotShown")) << msg;
}

TEST_F(S3Client_, StoppedServerIsRetriedThenReportedWithTheAttempts) {
    S3Client c;
    c.put(k_bucket, "r/x", "payload");
    stop();
    const auto t0 = std::chrono::steady_clock::now();
    const std::string msg = error_of([&] { c.get(k_bucket, "r/x"); });
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(contains(msg, "s3://loom-test/r/x")) << msg;
    EXPECT_TRUE(contains(msg, "4 attempts")) << msg;  // LOOM_REMOTE_MAX_ATTEMPTS
    // Backoff 0.1 + 0.2 + 0.4 s (+ up to 25% jitter) between the attempts.
    EXPECT_GE(secs, 0.65);
}

TEST_F(S3Client_, ServerBackDuringTheRetriesSucceeds) {
    ::setenv("LOOM_REMOTE_MAX_ATTEMPTS", "8", 1);
    ::setenv("LOOM_REMOTE_RETRY_BASE_MS", "200", 1);
    S3Client c;
    c.put(k_bucket, "r/y", "still here");
    stop();
    // Backoff 0.2, 0.4, 0.8, 1.6 ... s: the server is back within the budget.
    std::thread restart([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(700));
        start();
    });
    std::string got;
    EXPECT_NO_THROW(got = c.get(k_bucket, "r/y"));
    restart.join();
    EXPECT_EQ(got, "still here");
}

// A shard streaming through ByteSource when the store goes away mid-read:
// the blocks already fetched still read, the next one is retried and then
// fails with the URI and the offset.
TEST_F(S3Client_, StoreStoppedMidStreamFailsNamingUriAndOffset) {
    const std::string bytes = pattern_bytes(1 << 20, 5);
    S3Client().put(k_bucket, "stream/shard-00000.bin", bytes);
    ByteSourceOptions o;
    o.block_bytes = 64 << 10;
    o.read_ahead_blocks = 1;
    auto src = open_byte_source(uri("stream/shard-00000.bin"), o);
    std::string head(1000, '\0');
    src->read(0, head.size(), head.data());
    EXPECT_EQ(head, bytes.substr(0, 1000));
    stop();
    std::string again(1000, '\0');
    src->read(10, again.size(), again.data());  // still in the fetched block
    EXPECT_EQ(again, bytes.substr(10, 1000));
    std::string far(100, '\0');
    const std::string msg = error_of([&] { src->read(700000, far.size(), far.data()); });
    EXPECT_TRUE(contains(msg, "s3://loom-test/stream/shard-00000.bin")) << msg;
    EXPECT_TRUE(contains(msg, "attempts")) << msg;
    EXPECT_TRUE(contains(msg, "bytes 655360..720896")) << msg;  // the 64 KiB block holding 700000
}

}  // namespace
}  // namespace loom
