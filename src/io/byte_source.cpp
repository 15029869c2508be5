// ByteSource implementations (byte_source.h): a local file read with pread,
// and a remote object (http(s) or S3) read in blocks through a small cache
// that background threads fill ahead of a sequential reader.
#include "io/byte_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "core/check.h"
#include "core/cpu_bind.h"
#include "io/http_client.h"
#include "io/s3_client.h"
#include "io/uri.h"

namespace loom {

namespace {

class LocalFileSource final : public ByteSource {
  public:
    explicit LocalFileSource(std::string path) : path_(std::move(path)) {
        fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
        LOOM_CHECK(fd_ >= 0, "cannot open '{}': {}", path_, std::generic_category().message(errno));
        struct stat st {};
        if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
            ::close(fd_);
            LOOM_FAIL("cannot read '{}': not a regular file", path_);
        }
        size_ = uint64_t(st.st_size);
    }
    ~LocalFileSource() override { ::close(fd_); }
    uint64_t size() const override { return size_; }
    const std::string& uri() const override { return path_; }
    void read(uint64_t offset, size_t n, void* dst) override {
        LOOM_CHECK(offset + n <= size_,
                   "'{}': read of {} bytes at offset {} goes past the end ({} bytes)", path_, n,
                   offset, size_);
        size_t done = 0;
        while (done < n) {
            const ssize_t r =
                ::pread(fd_, static_cast<char*>(dst) + done, n - done, off_t(offset + done));
            if (r < 0 && errno == EINTR) continue;
            LOOM_CHECK(r > 0,
                       "'{}': truncated: expected {} bytes at offset {}, the file ends at {}{}",
                       path_, n, offset, offset + done,
                       r < 0 ? " (" + std::generic_category().message(errno) + ")" : "");
            done += size_t(r);
        }
    }

  private:
    std::string path_;
    int fd_ = -1;
    uint64_t size_ = 0;
};

// One connection that can learn the size and fetch a byte range.
class RangeFetcher {
  public:
    virtual ~RangeFetcher() = default;
    virtual uint64_t size() = 0;
    virtual void fetch(uint64_t offset, size_t n, void* dst) = 0;
};

class S3Fetcher final : public RangeFetcher {
  public:
    S3Fetcher(const Uri& u, const AwsSettings& s) : bucket_(u.bucket), key_(u.key), client_(s) {}
    uint64_t size() override {
        auto info = client_.head(bucket_, key_);
        LOOM_CHECK(info.has_value(), "{}: no such object (HTTP 404)", s3_uri(bucket_, key_));
        return info->size;
    }
    void fetch(uint64_t offset, size_t n, void* dst) override {
        client_.get_range(bucket_, key_, offset, n, dst);
    }

  private:
    std::string bucket_, key_;
    S3Client client_;
};

class HttpFetcher final : public RangeFetcher {
  public:
    explicit HttpFetcher(std::string url) : url_(std::move(url)), http_(AwsSettings{}) {}
    uint64_t size() override {
        HttpRequest r;
        r.method = "HEAD";
        r.url = url_;
        HttpResponse resp = http_.perform(r);
        check(resp, "HEAD");
        const std::string len = resp.header("content-length");
        if (!len.empty()) return std::stoull(len);
        // No length on HEAD (chunked): a one-byte range reports the total.
        HttpRequest g;
        g.url = url_;
        g.range_offset = 0;
        g.range_length = 1;
        resp = http_.perform(g);
        check(resp, "GET");
        const std::string cr = resp.header("content-range");
        const size_t slash = cr.find('/');
        LOOM_CHECK(resp.status == 206 && slash != std::string::npos && cr.substr(slash + 1) != "*",
                   "{}: the server reports no size (no Content-Length or Content-Range), so it "
                   "cannot be read by ranges",
                   url_);
        return std::stoull(cr.substr(slash + 1));
    }
    void fetch(uint64_t offset, size_t n, void* dst) override {
        HttpRequest r;
        r.url = url_;
        r.range_offset = int64_t(offset);
        r.range_length = n;
        size_t got = 0;
        r.sink = [&](const char* data, size_t len) {
            LOOM_CHECK(got + len <= n,
                       "GET {}: the server ignored the Range header (sent more "
                       "than {} bytes at offset {})",
                       url_, n, offset);
            std::memcpy(static_cast<char*>(dst) + got, data, len);
            got += len;
        };
        r.reset = [&] { got = 0; };
        HttpResponse resp = http_.perform(r);
        LOOM_CHECK(resp.status != 416,
                   "GET {}: truncated: bytes {}..{} asked for, but the file "
                   "ends before offset {} (HTTP 416)",
                   url_, offset, offset + n, offset);
        check(resp, "GET");
        LOOM_CHECK(got == n, "GET {}: truncated: expected {} bytes at offset {}, got {}", url_, n,
                   offset, got);
    }

  private:
    void check(const HttpResponse& resp, const char* op) const {
        LOOM_CHECK(
            resp.status >= 200 &&
                    resp.status<300, "{} {}: HTTP {}{}", op, url_, resp.status, resp.attempts> 1
                ? fmt::format(" (after {} attempts)", resp.attempts)
                : "");
    }
    std::string url_;
    HttpClient http_;
};

// Block cache with background read-ahead. A block is fetched by exactly one
// thread: whoever moves it out of `queued` (the reader for a block it needs
// now, a worker for a prefetch).
class RemoteSource final : public ByteSource {
  public:
    using Factory = std::function<std::unique_ptr<RangeFetcher>()>;

    RemoteSource(std::string uri, Factory factory, const ByteSourceOptions& o)
        : uri_(std::move(uri)), factory_(std::move(factory)), opts_(o) {
        LOOM_CHECK(opts_.block_bytes > 0, "ByteSourceOptions::block_bytes must be > 0");
        fg_ = factory_();
        size_ = fg_->size();
        n_blocks_ = (size_ + opts_.block_bytes - 1) / opts_.block_bytes;
        if (opts_.read_ahead_blocks > 0 && n_blocks_ > 1)
            for (int i = 0; i < std::max(1, opts_.fetch_threads); ++i)
                workers_.emplace_back([this] {
                    cpu_unbind_this_thread();
                    worker();
                });
    }
    ~RemoteSource() override {
        {
            std::lock_guard<std::mutex> lk(m_);
            stop_ = true;
        }
        cv_.notify_all();
        for (auto& t : workers_) t.join();
    }
    uint64_t size() const override { return size_; }
    const std::string& uri() const override { return uri_; }
    uint64_t fetched_bytes() const override { return fetched_.load(); }

    void read(uint64_t offset, size_t n, void* dst) override {
        LOOM_CHECK(offset + n <= size_,
                   "{}: read of {} bytes at offset {} goes past the end ({} bytes)", uri_, n,
                   offset, size_);
        if (n == 0) return;
        const uint64_t bs = opts_.block_bytes;
        const uint64_t first = offset / bs, last = (offset + n - 1) / bs;
        char* out = static_cast<char*>(dst);
        for (uint64_t b = first; b <= last; ++b) {
            std::shared_ptr<Block> blk = get_block(b);
            const uint64_t b_start = b * bs;
            const uint64_t from = std::max(offset, b_start);
            const uint64_t to = std::min(offset + n, b_start + blk->data.size());
            LOOM_CHECK(to > from || from == offset + n, "{}: truncated at offset {}", uri_, from);
            std::memcpy(out + (from - offset), blk->data.data() + (from - b_start), to - from);
        }
        plan_ahead(first, last);
    }

  private:
    enum class State { queued, fetching, ready, failed };
    struct Block {
        State state = State::queued;
        std::string data;  // (min(block_bytes, size - index*block_bytes),)
        std::string error;
    };

    size_t block_len(uint64_t b) const {
        return size_t(std::min<uint64_t>(opts_.block_bytes, size_ - b * opts_.block_bytes));
    }

    // Fetches block b into blk (no lock held) and publishes the result.
    void fill(RangeFetcher& f, uint64_t b, const std::shared_ptr<Block>& blk) {
        std::string data(block_len(b), '\0');
        std::string error;
        try {
            f.fetch(b * opts_.block_bytes, data.size(), data.data());
            fetched_ += data.size();
        } catch (const std::exception& e) {
            error = e.what();
        }
        {
            std::lock_guard<std::mutex> lk(m_);
            if (error.empty()) {
                blk->data = std::move(data);
                blk->state = State::ready;
            } else {
                blk->error = std::move(error);
                blk->state = State::failed;
            }
        }
        cv_.notify_all();
    }

    std::shared_ptr<Block> get_block(uint64_t b) {
        std::unique_lock<std::mutex> lk(m_);
        auto it = blocks_.find(b);
        if (it == blocks_.end() || it->second->state == State::queued) {
            std::shared_ptr<Block> blk =
                it == blocks_.end() ? blocks_.emplace(b, std::make_shared<Block>()).first->second
                                    : it->second;
            blk->state = State::fetching;
            lk.unlock();
            fill(*fg_, b, blk);
            lk.lock();
        }
        std::shared_ptr<Block> blk = blocks_.at(b);
        cv_.wait(lk, [&] { return blk->state == State::ready || blk->state == State::failed; });
        if (blk->state == State::failed) {
            const std::string err = blk->error;
            blocks_.erase(b);  // a later read tries again
            const uint64_t at = b * opts_.block_bytes;
            LOOM_FAIL("{} (reading bytes {}..{} of {})", err, at, at + block_len(b), size_);
        }
        return blk;
    }

    // After a read of blocks [first, last]: queue the next read_ahead_blocks
    // and drop blocks the reader has passed.
    void plan_ahead(uint64_t first, uint64_t last) {
        if (workers_.empty()) return;
        {
            std::lock_guard<std::mutex> lk(m_);
            const uint64_t end =
                std::min<uint64_t>(n_blocks_, last + 1 + uint64_t(opts_.read_ahead_blocks));
            for (uint64_t b = last + 1; b < end; ++b)
                if (!blocks_.count(b)) {
                    blocks_.emplace(b, std::make_shared<Block>());
                    queue_.push_back(b);
                }
            for (auto it = blocks_.begin(); it != blocks_.end();) {
                const bool behind = it->first < first;
                const bool far = it->first >= end;  // left over from before a jump
                const bool idle = it->second->state != State::fetching;
                it = (behind || far) && idle ? blocks_.erase(it) : std::next(it);
            }
        }
        cv_.notify_all();
    }

    void worker() {
        std::unique_ptr<RangeFetcher> f;
        for (;;) {
            uint64_t b = 0;
            std::shared_ptr<Block> blk;
            {
                std::unique_lock<std::mutex> lk(m_);
                cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
                if (stop_) return;
                b = queue_.front();
                queue_.pop_front();
                auto it = blocks_.find(b);
                if (it == blocks_.end() || it->second->state != State::queued) continue;
                blk = it->second;
                blk->state = State::fetching;
            }
            try {
                if (!f) f = factory_();
            } catch (const std::exception& e) {
                {
                    std::lock_guard<std::mutex> lk(m_);
                    blk->error = e.what();
                    blk->state = State::failed;
                }
                cv_.notify_all();
                continue;
            }
            fill(*f, b, blk);
        }
    }

    std::string uri_;
    Factory factory_;
    ByteSourceOptions opts_;
    std::unique_ptr<RangeFetcher> fg_;  // the reading thread's connection
    uint64_t size_ = 0, n_blocks_ = 0;
    std::atomic<uint64_t> fetched_{0};
    std::mutex m_;
    std::condition_variable cv_;
    std::map<uint64_t, std::shared_ptr<Block>> blocks_;
    std::deque<uint64_t> queue_;
    bool stop_ = false;
    std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<ByteSource> open_byte_source(const std::string& text, const ByteSourceOptions& o) {
    const Uri u = parse_uri(text);
    switch (u.scheme) {
        case UriScheme::local:
            return std::make_unique<LocalFileSource>(u.path);
        case UriScheme::s3: {
            LOOM_CHECK(!u.key.empty() && !u.key.ends_with('/'),
                       "'{}': expected an object (s3://bucket/key), got a bucket or prefix", text);
            const AwsSettings s = resolve_aws_settings();
            return std::make_unique<RemoteSource>(
                text, [u, s] { return std::make_unique<S3Fetcher>(u, s); }, o);
        }
        case UriScheme::http:
        case UriScheme::https:
            return std::make_unique<RemoteSource>(
                text, [u] { return std::make_unique<HttpFetcher>(u.url); }, o);
    }
    LOOM_FAIL("'{}': unsupported URI", text);
}

}  // namespace loom
