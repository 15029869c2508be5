// Memory-mapped local shards (shard_source.h).
#include "data/shard_source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/check.h"
#include "io/byte_source.h"
#include "io/uri.h"

namespace loom {

namespace {

class MappedShard : public ShardSource {
  public:
    explicit MappedShard(const std::string& path) : path_(path) {
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        LOOM_CHECK(fd >= 0, "token shard {}: cannot open: {}", path, std::strerror(errno));
        struct stat st {};
        if (::fstat(fd, &st) != 0) {
            const int e = errno;
            ::close(fd);
            LOOM_FAIL("token shard {}: cannot stat: {}", path, std::strerror(e));
        }
        size_ = uint64_t(st.st_size);
        if (size_ > 0) {
            void* p = ::mmap(nullptr, size_t(size_), PROT_READ, MAP_SHARED, fd, 0);
            const int e = errno;
            ::close(fd);
            LOOM_CHECK(p != MAP_FAILED, "token shard {}: cannot map {} bytes: {}", path, size_,
                       std::strerror(e));
            data_ = static_cast<const uint8_t*>(p);
        } else {
            ::close(fd);
        }
    }
    ~MappedShard() override {
        if (data_) ::munmap(const_cast<uint8_t*>(data_), size_t(size_));
    }
    MappedShard(const MappedShard&) = delete;
    MappedShard& operator=(const MappedShard&) = delete;

    uint64_t size() const override { return size_; }
    void read(uint64_t offset, size_t n, void* dst) const override {
        LOOM_CHECK(offset <= size_ && n <= size_ - offset,
                   "token shard {}: truncated: {} bytes wanted at offset {}, the file has {}",
                   path_, n, offset, size_);
        if (n > 0) std::memcpy(dst, data_ + offset, n);
    }
    const std::string& name() const override { return path_; }
    const uint8_t* mapped() const override { return data_; }

  private:
    std::string path_;
    uint64_t size_ = 0;
    const uint8_t* data_ = nullptr;
};

}  // namespace

std::unique_ptr<ShardSource> open_mapped_shard(const std::string& path) {
    return std::make_unique<MappedShard>(path);
}

namespace {

class RemoteShard : public ShardSource {
  public:
    explicit RemoteShard(const std::string& uri) : uri_(uri), src_(open_byte_source(uri)) {}
    uint64_t size() const override { return src_->size(); }
    void read(uint64_t offset, size_t n, void* dst) const override {
        LOOM_CHECK(offset <= size() && n <= size() - offset,
                   "token shard {}: truncated: {} bytes wanted at offset {}, the object has {}",
                   uri_, n, offset, size());
        if (n > 0) src_->read(offset, n, dst);
    }
    const std::string& name() const override { return uri_; }

  private:
    std::string uri_;
    std::unique_ptr<ByteSource> src_;  // read() is serialised by ShardDataset
};

}  // namespace

std::unique_ptr<ShardSource> open_remote_shard(const std::string& uri) {
    return std::make_unique<RemoteShard>(uri);
}

std::unique_ptr<ShardSource> open_shard_source(const std::string& path_or_uri) {
    if (is_remote_uri(path_or_uri)) return open_remote_shard(path_or_uri);
    return open_mapped_shard(path_or_uri);
}

}  // namespace loom
