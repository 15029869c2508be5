// Plain, gzip and zstd input streams (see input_stream.h). gzip goes through
// zlib's inflate with automatic header detection (windowBits 15 + 32), so
// concatenated members (`cat a.gz b.gz`) are read as one stream, as gzip -d
// does; zstd through ZSTD_decompressStream, which also reads concatenated frames.
#include "data/input_stream.h"

#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/check.h"

namespace loom {

namespace {

constexpr size_t k_in_bytes = size_t(1) << 18;

bool ends_with(std::string_view s, std::string_view suffix) {
    if (s.size() < suffix.size()) return false;
    for (size_t i = 0; i < suffix.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(s[s.size() - suffix.size() + i])) != suffix[i])
            return false;
    return true;
}

class File {
  public:
    explicit File(const std::string& path) : path_(path) {
        f_ = std::fopen(path.c_str(), "rb");
        LOOM_CHECK(f_ != nullptr, "cannot open data file '{}': {}", path, std::strerror(errno));
    }
    ~File() { std::fclose(f_); }
    File(const File&) = delete;
    File& operator=(const File&) = delete;
    size_t read(char* dst, size_t n) {
        const size_t got = std::fread(dst, 1, n, f_);
        LOOM_CHECK(got > 0 || !std::ferror(f_), "read error in data file '{}'", path_);
        bytes_ += got;
        return got;
    }
    uint64_t bytes() const { return bytes_; }
    const std::string& path() const { return path_; }

  private:
    std::FILE* f_ = nullptr;
    std::string path_;
    uint64_t bytes_ = 0;
};

class PlainStream : public InputStream {
  public:
    explicit PlainStream(const std::string& path) : file_(path) {}
    size_t read(char* dst, size_t n) override { return file_.read(dst, n); }
    uint64_t raw_bytes_read() const override { return file_.bytes(); }

  private:
    File file_;
};

class GzipStream : public InputStream {
  public:
    explicit GzipStream(const std::string& path) : file_(path), in_(k_in_bytes) {
        std::memset(&z_, 0, sizeof(z_));
        LOOM_CHECK(inflateInit2(&z_, 15 + 32) == Z_OK, "{}: zlib could not start", path);
    }
    ~GzipStream() override { inflateEnd(&z_); }

    size_t read(char* dst, size_t n) override {
        z_.next_out = reinterpret_cast<Bytef*>(dst);
        z_.avail_out = uInt(n);
        while (z_.avail_out == n) {
            if (z_.avail_in == 0) {
                if (eof_) {
                    LOOM_CHECK(!mid_member_,
                               "{}: the gzip data ends early (truncated at compressed byte {})",
                               file_.path(), file_.bytes());
                    return 0;
                }
                const size_t got = file_.read(in_.data(), in_.size());
                if (got == 0) {
                    eof_ = true;
                    continue;
                }
                z_.next_in = reinterpret_cast<Bytef*>(in_.data());
                z_.avail_in = uInt(got);
            }
            mid_member_ = true;
            const int rc = inflate(&z_, Z_NO_FLUSH);
            if (rc == Z_STREAM_END) {
                // Another member may follow (concatenated .gz files).
                mid_member_ = false;
                LOOM_CHECK(inflateReset(&z_) == Z_OK, "{}: zlib reset failed", file_.path());
                continue;
            }
            LOOM_CHECK(rc == Z_OK || rc == Z_BUF_ERROR,
                       "{}: not valid gzip data near compressed byte {} ({})", file_.path(),
                       file_.bytes() - z_.avail_in, z_.msg ? z_.msg : zError(rc));
        }
        return n - z_.avail_out;
    }
    uint64_t raw_bytes_read() const override { return file_.bytes() - z_.avail_in; }

  private:
    File file_;
    std::vector<char> in_;
    z_stream z_;
    bool eof_ = false;
    bool mid_member_ = false;  // inside a gzip member (its end not seen yet)
};

class ZstdStream : public InputStream {
  public:
    explicit ZstdStream(const std::string& path) : file_(path), in_(ZSTD_DStreamInSize()) {
        ds_ = ZSTD_createDStream();
        LOOM_CHECK(ds_ != nullptr, "{}: zstd could not start", path);
        ZSTD_initDStream(ds_);
    }
    ~ZstdStream() override { ZSTD_freeDStream(ds_); }

    size_t read(char* dst, size_t n) override {
        ZSTD_outBuffer out{dst, n, 0};
        while (out.pos == 0) {
            if (in_pos_ == in_len_) {
                in_len_ = file_.read(in_.data(), in_.size());
                in_pos_ = 0;
                if (in_len_ == 0) {
                    LOOM_CHECK(frame_done_,
                               "{}: the zstd data ends early (truncated at compressed byte {})",
                               file_.path(), file_.bytes());
                    return 0;
                }
            }
            ZSTD_inBuffer in{in_.data(), in_len_, in_pos_};
            const size_t rc = ZSTD_decompressStream(ds_, &out, &in);
            in_pos_ = in.pos;
            LOOM_CHECK(!ZSTD_isError(rc), "{}: not valid zstd data near compressed byte {} ({})",
                       file_.path(), raw_bytes_read(), ZSTD_getErrorName(rc));
            frame_done_ = rc == 0;
        }
        return out.pos;
    }
    uint64_t raw_bytes_read() const override { return file_.bytes() - (in_len_ - in_pos_); }

  private:
    File file_;
    std::vector<char> in_;
    size_t in_pos_ = 0, in_len_ = 0;
    ZSTD_DStream* ds_ = nullptr;
    bool frame_done_ = true;  // an empty file is an empty stream
};

}  // namespace

Compression compression_of(std::string_view path) {
    if (ends_with(path, ".gz")) return Compression::gzip;
    if (ends_with(path, ".zst") || ends_with(path, ".zstd")) return Compression::zstd;
    return Compression::none;
}

std::string_view strip_compression_suffix(std::string_view path) {
    for (std::string_view s : {".gz", ".zst", ".zstd"})
        if (ends_with(path, s)) return path.substr(0, path.size() - s.size());
    return path;
}

std::unique_ptr<InputStream> open_input_stream(const std::string& path) {
    switch (compression_of(path)) {
        case Compression::gzip:
            return std::make_unique<GzipStream>(path);
        case Compression::zstd:
            return std::make_unique<ZstdStream>(path);
        case Compression::none:
            break;
    }
    return std::make_unique<PlainStream>(path);
}

}  // namespace loom
