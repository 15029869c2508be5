// TensorBoard events: CRC-32C vectors, and the file parsed back with an
// independent TFRecord/protobuf decoder and a bitwise CRC.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "train/log_tensorboard.h"
#include "train_test_util.h"

namespace loom {
namespace {

std::span<const uint8_t> bytes(const std::string& s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Crc32c, KnownVectors) {
    // RFC 3720 (iSCSI) appendix B.4 and the classic check value.
    EXPECT_EQ(crc32c(bytes("123456789")), 0xE3069283u);
    std::string zeros(32, '\0'), ones(32, '\xff'), up(32, 0), down(32, 0);
    for (int i = 0; i < 32; ++i) {
        up[i] = static_cast<char>(i);
        down[i] = static_cast<char>(31 - i);
    }
    EXPECT_EQ(crc32c(bytes(zeros)), 0x8A9136AAu);
    EXPECT_EQ(crc32c(bytes(ones)), 0x62A8AB43u);
    EXPECT_EQ(crc32c(bytes(up)), 0x46DD794Eu);
    EXPECT_EQ(crc32c(bytes(down)), 0x113FDB5Cu);
    // Incremental use gives the same answer.
    EXPECT_EQ(crc32c(bytes("6789"), crc32c(bytes("12345"))), 0xE3069283u);
    // Masking: crc32c("") = 0, so the mask is the bare delta.
    EXPECT_EQ(tfrecord_masked_crc(bytes("")), 0xa282ead8u);
}

// --- an independent reader ---------------------------------------------------

uint32_t crc32c_bitwise(const uint8_t* p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) {
        c ^= p[i];
        for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return ~c;
}
uint32_t masked(const uint8_t* p, size_t n) {
    uint32_t c = crc32c_bitwise(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

struct Field {
    int number = 0, wire = 0;
    uint64_t varint = 0;
    std::string bytes;  // fixed64 / fixed32 / length-delimited payload
};

std::vector<Field> decode(const std::string& msg) {
    std::vector<Field> out;
    size_t i = 0;
    auto varint = [&]() {
        uint64_t v = 0;
        for (int shift = 0; i < msg.size(); shift += 7) {
            auto b = static_cast<uint8_t>(msg[i++]);
            v |= static_cast<uint64_t>(b & 0x7F) << shift;
            if (!(b & 0x80)) break;
        }
        return v;
    };
    while (i < msg.size()) {
        uint64_t key = varint();
        Field f;
        f.number = static_cast<int>(key >> 3);
        f.wire = static_cast<int>(key & 7);
        if (f.wire == 0) f.varint = varint();
        size_t n = f.wire == 1 ? 8 : f.wire == 5 ? 4 : f.wire == 2 ? varint() : 0;
        f.bytes = msg.substr(i, n);
        i += n;
        out.push_back(f);
    }
    return out;
}

struct Event {
    double wall_time = 0;
    int64_t step = -1;
    std::string file_version;
    int session_status = -1;  // SessionLog.status, -1: no session_log
    std::vector<std::pair<std::string, float>> values;
};

std::vector<Event> read_events(const std::string& data) {
    std::vector<Event> events;
    size_t i = 0;
    while (i < data.size()) {
        EXPECT_LE(i + 12, data.size());
        const auto* p = reinterpret_cast<const uint8_t*>(data.data() + i);
        uint64_t len;
        uint32_t len_crc, data_crc;
        std::memcpy(&len, p, 8);
        std::memcpy(&len_crc, p + 8, 4);
        EXPECT_EQ(len_crc, masked(p, 8)) << "length crc of record " << events.size();
        std::memcpy(&data_crc, p + 12 + len, 4);
        EXPECT_EQ(data_crc, masked(p + 12, len)) << "data crc of record " << events.size();
        Event e;
        for (const Field& f : decode(data.substr(i + 12, len))) {
            if (f.number == 1 && f.wire == 1) std::memcpy(&e.wall_time, f.bytes.data(), 8);
            if (f.number == 2 && f.wire == 0) e.step = static_cast<int64_t>(f.varint);
            if (f.number == 3 && f.wire == 2) e.file_version = f.bytes;
            if (f.number == 7 && f.wire == 2) {
                e.session_status = 0;  // proto3 default: STATUS_UNSPECIFIED
                for (const Field& s : decode(f.bytes))
                    if (s.number == 1 && s.wire == 0) e.session_status = int(s.varint);
            }
            if (f.number == 5 && f.wire == 2)
                for (const Field& v : decode(f.bytes)) {
                    std::string tag;
                    float value = NAN;
                    for (const Field& vf : decode(v.bytes)) {
                        if (vf.number == 1) tag = vf.bytes;
                        if (vf.number == 2 && vf.wire == 5) std::memcpy(&value, vf.bytes.data(), 4);
                    }
                    e.values.emplace_back(tag, value);
                }
        }
        events.push_back(e);
        i += 12 + len + 4;
    }
    return events;
}

class TensorBoard : public test::TempDir {};

TEST_F(TensorBoard, EventFileParsesBack) {
    using namespace std::chrono;
    const double before = duration<double>(system_clock::now().time_since_epoch()).count();
    std::string path;
    {
        TensorBoardWriter w((dir_ / "runs").string());
        path = w.path();
        w.add_scalar("train/loss", 0.6931, 10, 1700000000.25);
        w.add_entry(train_log_entry(20, 0.5, 0.5, 2.0, 4e-5), 20);
        w.add_entry(eval_log_entry(20, 0.5, {{"loss", 0.45}, {"accuracy", 0.8}}), 20);
        w.add_scalar("big/step", 1.0, int64_t{1} << 40, 1.0);  // a multi-byte varint
    }
    EXPECT_EQ(std::filesystem::path(path).parent_path(), dir_ / "runs");
    EXPECT_TRUE(
        std::filesystem::path(path).filename().string().starts_with("events.out.tfevents."));
    auto events = read_events(slurp(path));
    ASSERT_EQ(events.size(), 1u + 1u + 4u + 3u + 1u);
    EXPECT_EQ(events[0].file_version, "brain.Event:2");
    EXPECT_GE(events[0].wall_time, before - 1);
    EXPECT_LE(events[0].wall_time, before + 60);
    EXPECT_EQ(events[1].wall_time, 1700000000.25);
    EXPECT_EQ(events[1].step, 10);
    ASSERT_EQ(events[1].values.size(), 1u);
    EXPECT_EQ(events[1].values[0].first, "train/loss");
    EXPECT_FLOAT_EQ(events[1].values[0].second, 0.6931f);
    // HF TensorBoardCallback tags (rewrite_logs: only eval_* keys leave "train/",
    // so the epoch of an evaluation line is train/epoch too).
    std::vector<std::string> tags;
    for (size_t k = 2; k < events.size() - 1; ++k) {
        EXPECT_EQ(events[k].step, 20);
        tags.push_back(events[k].values.at(0).first);
    }
    EXPECT_EQ(tags, (std::vector<std::string>{"train/loss", "train/grad_norm",
                                              "train/learning_rate", "train/epoch", "eval/loss",
                                              "eval/accuracy", "train/epoch"}));
    EXPECT_FLOAT_EQ(events[6].values[0].second, 0.45f);
    EXPECT_EQ(events.back().step, int64_t{1} << 40);
}

TEST_F(TensorBoard, AResumedRunMarksWhereTensorBoardPurgesTheOldSteps) {
    std::string path;
    {
        TensorBoardWriter w((dir_ / "runs").string(), 13);
        path = w.path();
        w.add_scalar("train/loss", 0.5, 13, 1.0);
    }
    auto events = read_events(slurp(path));
    ASSERT_EQ(events.size(), 3u);
    EXPECT_EQ(events[0].file_version, "brain.Event:2");
    EXPECT_EQ(events[0].session_status, -1);
    EXPECT_EQ(events[1].step, 13);
    EXPECT_EQ(events[1].session_status, 1);  // START
    EXPECT_TRUE(events[1].values.empty());
    EXPECT_EQ(events[2].step, 13);
    EXPECT_EQ(events[2].session_status, -1);
    // A fresh run writes no session_log.
    {
        TensorBoardWriter w((dir_ / "fresh").string());
        path = w.path();
    }
    events = read_events(slurp(path));
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].session_status, -1);
}

TEST_F(TensorBoard, ReadableByTensorBoardItself) {
    const char* py = "/usr/bin/python3";
    if (std::system((std::string(py) + " -c 'import tensorboard' 2>/dev/null").c_str()) != 0)
        GTEST_SKIP() << "the tensorboard Python package is not installed (Debian 12 does not "
                        "package it); the independent decoder above covers the format";
    std::string path;
    {
        TensorBoardWriter w(dir_.string());
        path = w.path();
        w.add_scalar("train/loss", 1.25, 7);
    }
    std::string script =
        "from tensorboard.backend.event_processing import event_accumulator as ea\n"
        "a = ea.EventAccumulator('" +
        dir_.string() +
        "'); a.Reload()\n"
        "s = a.Scalars('train/loss'); assert len(s) == 1 and s[0].step == 7 and s[0].value == "
        "1.25\n";
    std::ofstream(dir_ / "check.py") << script;
    EXPECT_EQ(std::system((std::string(py) + " " + (dir_ / "check.py").string()).c_str()), 0);
}

}  // namespace
}  // namespace loom
