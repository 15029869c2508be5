// Storage: bytes on one device. CPU storage is 64-byte aligned (AVX-512 lines).
// Storage can also wrap memory it does not own (a memory-mapped file), with a
// release callback that runs when the last tensor viewing it goes away.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

namespace loom {

enum class Device : uint8_t { cpu, cuda };

class Storage {
public:
    // Zero-filled when `zero` is set (the default): fresh memory is touched once
    // here rather than lazily inside a timed kernel.
    static std::shared_ptr<Storage> alloc(size_t nbytes, bool zero = true);
    static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, std::function<void()> release,
                                         Device device = Device::cpu);
    ~Storage();
    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;

    void* data() const { return data_; }
    size_t nbytes() const { return nbytes_; }
    Device device() const { return device_; }

private:
    Storage() = default;
    void* data_ = nullptr;
    size_t nbytes_ = 0;
    Device device_ = Device::cpu;
    std::function<void()> release_;
};

}  // namespace loom
