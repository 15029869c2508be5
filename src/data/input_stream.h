// InputStream: sequential bytes of a data file, decompressed on the fly when
// the name ends in .gz (zlib) or .zst/.zstd (libzstd). The line reader of
// every text format (JSONL, CSV/TSV, plain text) reads through it, so
// `corpus.jsonl.gz` or a folder of `*.txt.zst` files read like plain files.
//
// Invariant: read() returns 0 only at the true end of the (decompressed)
// data; a damaged or truncated compressed file is an error naming the file
// and the compressed byte offset reached, never a silent short read.
// Not here: random access or writing compressed files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace loom {

enum class Compression { none, gzip, zstd };

// By file name: "a.txt.gz" -> gzip, "a.jsonl.zst" -> zstd, else none.
Compression compression_of(std::string_view path);
// The name without its compression suffix ("a.txt.gz" -> "a.txt"), to find the format.
std::string_view strip_compression_suffix(std::string_view path);

class InputStream {
  public:
    virtual ~InputStream() = default;
    // Up to n bytes into dst; 0 at the end. Throws loom::Error on bad data.
    virtual size_t read(char* dst, size_t n) = 0;
    // Bytes consumed from the file on disk so far (compressed bytes for
    // compressed files): progress against the file's size.
    virtual uint64_t raw_bytes_read() const = 0;
};

std::unique_ptr<InputStream> open_input_stream(const std::string& path);

}  // namespace loom
