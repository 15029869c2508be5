// Sequential read throughput through ByteSource (io/byte_source.h): what a
// rank streaming token shards sees from local disk or object storage.
//   bench_byte_source URI [--block-mb 8] [--read-kb 256] [--ahead 4]
// Prints one JSON line: bytes, seconds, MB/s.
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "io/byte_source.h"

int main(int argc, char** argv) {
    if (argc < 2) {
        fmt::print(stderr,
                   "usage: bench_byte_source URI [--block-mb 8] [--read-kb 256] [--ahead 4]\n");
        return 2;
    }
    const std::string uri = argv[1];
    loom::ByteSourceOptions o;
    size_t read_bytes = 256 << 10;
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--block-mb")
            o.block_bytes = size_t(std::atof(v.c_str()) * double(1 << 20));
        else if (k == "--read-kb")
            read_bytes = size_t(std::atof(v.c_str()) * 1024);
        else if (k == "--ahead")
            o.read_ahead_blocks = std::atoi(v.c_str());
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto src = loom::open_byte_source(uri, o);
    const uint64_t n = src->size();
    std::vector<char> buf(read_bytes);
    uint64_t sum = 0;
    for (uint64_t at = 0; at < n; at += read_bytes) {
        const size_t k = size_t(std::min<uint64_t>(read_bytes, n - at));
        src->read(at, k, buf.data());
        sum += uint8_t(buf[0]);  // keep the reads observable
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print(
        "{{\"uri\": \"{}\", \"bytes\": {}, \"seconds\": {:.3f}, \"mb_per_s\": {:.1f}, \"check\": "
        "{}}}\n",
        uri, n, s, double(n) / 1e6 / s, sum);
    return 0;
}
