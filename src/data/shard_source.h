// ShardSource: the bytes of one token shard, from a memory-mapped local file
// or (later) any random-access byte source such as an object-storage stream.
//
// The interface is the one io/byte_source.h's remote readers offer (size,
// read(offset, n, dst), a name for messages), plus `mapped()` for the local
// case, where rows are read in place without copying. A source that cannot
// map returns nullptr there and ShardFile copies what it needs through read().
//
// Invariant: read() fills exactly n bytes or throws naming the shard and the
// offset; it never returns short.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace loom {

class ShardSource {
  public:
    virtual ~ShardSource() = default;
    virtual uint64_t size() const = 0;
    virtual void read(uint64_t offset, size_t n, void* dst) const = 0;
    virtual const std::string& name() const = 0;
    // The whole shard in memory (read-only), or nullptr.
    virtual const uint8_t* mapped() const { return nullptr; }
};

// mmap(2) of a local file, read-only, MAP_SHARED: pages come from the page
// cache on first touch, so a rank touches only the rows it reads.
std::unique_ptr<ShardSource> open_mapped_shard(const std::string& path);

// An s3:// or http(s):// shard through io/byte_source.h (ranged GETs with
// read-ahead and retries); reads are serialised by the dataset.
std::unique_ptr<ShardSource> open_remote_shard(const std::string& uri);

// Local paths are mapped, s3:// and http(s):// URIs streamed.
std::unique_ptr<ShardSource> open_shard_source(const std::string& path_or_uri);

}  // namespace loom
