// S3Client: the S3 REST calls Loom needs, over one HttpClient (SigV4, retries).
//
//   GET (whole, ranged, to a file)   HEAD   PUT (single or multipart)
//   ListObjectsV2 (every page)       DELETE
//
// Addressing: with an endpoint (AWS_ENDPOINT_URL, aws_credentials.h) requests
// go path-style to ENDPOINT/BUCKET/KEY; without one to AWS's virtual-hosted
// https://BUCKET.s3.REGION.amazonaws.com/KEY. Query strings are built already
// sorted and percent-encoded, so the canonical request curl signs is the one
// S3 recomputes.
//
// Errors name the operation, the s3:// URI, the HTTP status and S3's error
// code and message; a 403 also names the credentials used (access key id and
// where it came from, never the secret). A short body (an object truncated or
// replaced mid-read) is an error naming the offset.
//
// Uploads are all-or-nothing per object: a multipart upload that fails is
// aborted, and S3 shows an object only once PUT or CompleteMultipartUpload
// has succeeded.
//
// Thread safety: one client per thread (it owns one connection).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/aws_credentials.h"
#include "io/http_client.h"

namespace loom {

struct S3ObjectInfo {
    std::string key;
    uint64_t size = 0;
    std::string etag;
};

struct S3Options {
    uint64_t multipart_threshold_bytes = uint64_t(64) << 20;  // larger files go in parts
    uint64_t part_bytes = uint64_t(16) << 20;                 // S3's minimum is 5 MiB
    int list_page_keys = 1000;  // ListObjectsV2 max-keys (S3's own page limit is 1000)
};

class S3Client {
  public:
    explicit S3Client(AwsSettings settings = resolve_aws_settings(),
                      RetryPolicy policy = RetryPolicy::from_environment(), S3Options options = {});

    // Size and ETag, or nullopt when the object does not exist (404).
    std::optional<S3ObjectInfo> head(const std::string& bucket, const std::string& key);
    // Exactly n bytes at offset into dst (an error if the object is shorter).
    void get_range(const std::string& bucket, const std::string& key, uint64_t offset, size_t n,
                   void* dst);
    std::string get(const std::string& bucket, const std::string& key);
    // Streams the object into `path` (written as path.tmp.<pid>, renamed when
    // complete); returns its size.
    uint64_t get_to_file(const std::string& bucket, const std::string& key,
                         const std::string& path);
    void put(const std::string& bucket, const std::string& key, std::string_view bytes);
    // Single PUT up to multipart_threshold_bytes, multipart above.
    void put_file(const std::string& bucket, const std::string& key, const std::string& path);
    // Every object under `prefix`, all pages, in key order.
    std::vector<S3ObjectInfo> list(const std::string& bucket, const std::string& prefix);
    // Deleting a missing key is not an error (S3 semantics).
    void remove(const std::string& bucket, const std::string& key);

    // The request URL for bucket/key with an already canonical query ("" = none).
    std::string object_url(const std::string& bucket, const std::string& key,
                           const std::string& query = "") const;
    const AwsSettings& settings() const { return http_.settings(); }
    S3Options& options() { return options_; }

  private:
    [[noreturn]] void fail_status(const char* op, const std::string& bucket, const std::string& key,
                                  const HttpResponse& resp) const;
    void put_multipart(const std::string& bucket, const std::string& key, const std::string& path,
                       uint64_t size);

    HttpClient http_;
    S3Options options_;
};

// "s3://bucket/key".
std::string s3_uri(const std::string& bucket, const std::string& key);

// Text between <tag> and </tag> for every occurrence, XML entities decoded.
std::vector<std::string> xml_values(std::string_view xml, std::string_view tag);

}  // namespace loom
