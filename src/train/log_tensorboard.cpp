// TensorBoard event writer: TFRecord framing and a tiny protobuf encoder
// for the three messages involved (see log_tensorboard.h for the layout).
#include "train/log_tensorboard.h"

#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/check.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

// Reflected CRC-32C table (polynomial 0x1EDC6F41, reversed 0x82F63B78).
constexpr std::array<uint32_t, 256> make_crc_table() {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        t[i] = c;
    }
    return t;
}
constexpr auto k_crc_table = make_crc_table();

// --- protobuf wire format ---------------------------------------------------

void put_varint(std::string& out, uint64_t v) {
    while (v >= 0x80) {
        out.push_back(static_cast<char>((v & 0x7F) | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, int field, int wire_type) {
    put_varint(out, (static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}

template <class T>
void put_le(std::string& out, T v) {
    static_assert(std::endian::native == std::endian::little, "little-endian hosts only");
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.append(b, sizeof(T));
}

void put_bytes(std::string& out, int field, std::string_view bytes) {
    put_key(out, field, 2);  // length-delimited
    put_varint(out, bytes.size());
    out.append(bytes);
}

std::string event_header(double wall_time, int64_t step) {
    std::string e;
    put_key(e, 1, 1);  // wall_time: fixed64
    put_le(e, wall_time);
    put_key(e, 2, 0);  // step: varint (int64 as two's complement)
    put_varint(e, static_cast<uint64_t>(step));
    return e;
}

double now_seconds() {
    using namespace std::chrono;
    return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
    char buf[256] = {};
    if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
    return buf;
}

}  // namespace

uint32_t crc32c(std::span<const uint8_t> data, uint32_t crc) {
    crc = ~crc;
    for (uint8_t b : data) crc = k_crc_table[(crc ^ b) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

uint32_t tfrecord_masked_crc(std::span<const uint8_t> data) {
    uint32_t c = crc32c(data);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tensorboard_tag(std::string_view key) {
    if (key.starts_with("eval_")) return "eval/" + std::string(key.substr(5));
    if (key.starts_with("test_")) return "test/" + std::string(key.substr(5));
    return "train/" + std::string(key);
}

TensorBoardWriter::TensorBoardWriter(const std::string& logdir, int64_t purge_step) {
    fs::create_directories(logdir);
    const double t = now_seconds();
    // The same name PyTorch's SummaryWriter uses: time, host, pid, counter.
    std::string name = fmt::format("events.out.tfevents.{}.{}.{}.0", static_cast<int64_t>(t),
                                   host_name(), static_cast<int64_t>(getpid()));
    path_ = (fs::path(logdir) / name).string();
    f_ = std::fopen(path_.c_str(), "wb");
    LOOM_CHECK(f_ != nullptr, "cannot write TensorBoard events '{}': {}", path_,
               std::strerror(errno));
    std::string e = event_header(t, 0);
    put_bytes(e, 3, "brain.Event:2");
    write_record(e);
    if (purge_step >= 0) {
        std::string session_log;
        put_key(session_log, 1, 0);  // status: START
        put_varint(session_log, 1);
        std::string p = event_header(t, purge_step);
        put_bytes(p, 7, session_log);
        write_record(p);
    }
}

TensorBoardWriter::~TensorBoardWriter() {
    if (f_) std::fclose(f_);
}

void TensorBoardWriter::add_scalar(std::string_view tag, double value, int64_t step) {
    add_scalar(tag, value, step, now_seconds());
}

void TensorBoardWriter::add_scalar(std::string_view tag, double value, int64_t step,
                                   double wall_time) {
    std::string v;  // Summary.Value
    put_bytes(v, 1, tag);
    put_key(v, 2, 5);  // simple_value: fixed32 float
    put_le(v, static_cast<float>(value));
    std::string summary;
    put_bytes(summary, 1, v);
    std::string e = event_header(wall_time, step);
    put_bytes(e, 5, summary);
    write_record(e);
}

void TensorBoardWriter::add_entry(const LogEntry& entry, int64_t step) {
    const double t = now_seconds();
    for (const auto& [key, value] : entry.values)
        if (key != "step") add_scalar(tensorboard_tag(key), value, step, t);
}

void TensorBoardWriter::write_record(const std::string& data) {
    std::string rec;
    put_le(rec, static_cast<uint64_t>(data.size()));
    const uint32_t len_crc =
        tfrecord_masked_crc(std::span(reinterpret_cast<const uint8_t*>(rec.data()), 8));
    put_le(rec, len_crc);
    rec += data;
    put_le(rec, tfrecord_masked_crc(
                    std::span(reinterpret_cast<const uint8_t*>(data.data()), data.size())));
    bool ok = std::fwrite(rec.data(), 1, rec.size(), f_) == rec.size() && std::fflush(f_) == 0;
    LOOM_CHECK(ok, "writing TensorBoard events '{}' failed: {}", path_, std::strerror(errno));
}

}  // namespace loom
