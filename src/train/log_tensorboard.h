// TensorBoard event files, written by hand (no TensorFlow, no protobuf lib).
//
// File: <logdir>/events.out.tfevents.<unix time>.<host>.<pid>.0, a sequence of
// TFRecords:
//   uint64 length (little endian)
//   uint32 masked_crc32c(the 8 length bytes)
//   byte   data[length]            a serialized tensorflow.Event
//   uint32 masked_crc32c(data)
// masked_crc32c(x) = ((c >> 15) | (c << 17)) + 0xa282ead8 with c = CRC-32C(x).
//
// Event (tensorflow/core/util/event.proto), only the fields written here:
//   1: double wall_time   (fixed64)      2: int64 step (varint)
//   3: string file_version                5: Summary summary
//   7: SessionLog session_log
// Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
// SessionLog { SessionStatus status = 1; }  (START = 1)
// The first record is Event{wall_time, file_version: "brain.Event:2"}, as
// TensorBoard expects. Every record is flushed when written.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>

#include "train/log_jsonl.h"

namespace loom {

// CRC-32C (Castagnoli), as used by TFRecord.
uint32_t crc32c(std::span<const uint8_t> data, uint32_t crc = 0);
uint32_t tfrecord_masked_crc(std::span<const uint8_t> data);

// HF TensorBoardCallback's tag for a log_history key: "eval_loss" ->
// "eval/loss", "loss" -> "train/loss", "learning_rate" -> "train/learning_rate".
std::string tensorboard_tag(std::string_view key);

class TensorBoardWriter {
public:
    // Creates logdir if needed and writes the file_version record. A resumed
    // run passes purge_step (the first step it will log): a SessionLog START
    // at that step makes TensorBoard drop what earlier files logged at steps
    // >= it, i.e. what a stopped run logged after its last checkpoint, so the
    // repeated steps show once (PyTorch's SummaryWriter(purge_step=)).
    explicit TensorBoardWriter(const std::string& logdir, int64_t purge_step = -1);
    ~TensorBoardWriter();
    TensorBoardWriter(const TensorBoardWriter&) = delete;
    TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

    void add_scalar(std::string_view tag, double value, int64_t step);
    void add_scalar(std::string_view tag, double value, int64_t step, double wall_time);
    // Every value but "step", tagged as HF does (epoch too, as train/epoch).
    void add_entry(const LogEntry& entry, int64_t step);
    const std::string& path() const { return path_; }

private:
    void write_record(const std::string& data);
    std::string path_;
    std::FILE* f_ = nullptr;
};

}  // namespace loom
