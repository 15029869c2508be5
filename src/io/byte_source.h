// ByteSource: random-access reads from a local file, an http(s):// URL or an
// s3://bucket/key object, with read-ahead for remote ones. This is the
// interface token-shard readers use so a shard streams from object storage
// as it would from disk.
//
//   auto src = open_byte_source("s3://corpus/shards/train-00003.bin");
//   uint64_t n = src->size();
//   std::vector<char> buf(4096);
//   src->read(0, buf.size(), buf.data());    // exactly buf.size() bytes or an error
//
// Invariants:
// - read(offset, n, dst) fills exactly n bytes or throws loom::Error naming
//   the URI, the offset and the reason (HTTP status, a short object); it never
//   returns fewer bytes. Reading past size() is an error, not a short read.
// - size() is fixed when the source is opened (a HEAD request for remote
//   objects). An object replaced by a shorter one while open is reported as
//   truncated at the offset that could not be read.
// - Remote sources fetch whole blocks (block_bytes) with ranged GETs and keep
//   read_ahead_blocks blocks ahead of the last sequential read in flight on
//   background threads, so a reader going forward finds its next bytes in
//   memory in steady state. Random jumps fetch the block they need at once.
// - Transient failures (connection errors, HTTP 5xx, 429) are retried with
//   exponential backoff (http_client.h) before a read fails.
//
// Thread safety: one ByteSource serves one reading thread (its background
// threads are internal). Open one source per thread that reads.
//
// Not here: decoding (shard formats, JSONL) or caching across processes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace loom {

struct ByteSourceOptions {
    size_t block_bytes = size_t(8) << 20;  // one ranged GET (remote only)
    int read_ahead_blocks = 4;             // fetched ahead of a sequential reader
    int fetch_threads = 2;                 // background connections per source
};

class ByteSource {
public:
    virtual ~ByteSource() = default;
    // Total bytes in the file or object.
    virtual uint64_t size() const = 0;
    // Copies bytes [offset, offset + n) into dst; see the invariants above.
    virtual void read(uint64_t offset, size_t n, void* dst) = 0;
    // The URI or path it was opened with (for error messages).
    virtual const std::string& uri() const = 0;
    // Bytes fetched over the network so far (0 for local files); read-ahead
    // makes this run ahead of what read() has returned.
    virtual uint64_t fetched_bytes() const { return 0; }
};

// Opens a local path, http(s):// URL or s3:// URI (credentials, region and
// endpoint from the AWS environment, aws_credentials.h). Errors (missing file,
// 404, 403) name the URI and say why.
std::unique_ptr<ByteSource> open_byte_source(const std::string& uri,
                                             const ByteSourceOptions& options = {});

}  // namespace loom
