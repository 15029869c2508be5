// DeviceArena: one cudaMalloc'd region carved into typed buffers, planned by
// running the same layout twice (count, then hand out), as nn/module.h's
// ActArena does on the host. It only grows, so steady-state steps allocate
// nothing (cudaMalloc/cudaFree synchronise the device).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_check.h"

namespace loom {

class DeviceArena {
  public:
    DeviceArena() = default;
    ~DeviceArena() {
        if (base_) (void)cudaFree(base_);
    }
    DeviceArena(const DeviceArena&) = delete;
    DeviceArena& operator=(const DeviceArena&) = delete;

    template <typename Layout>
    void build(Layout&& layout) {
        counting_ = true;
        used_ = 0;
        layout(*this);
        const size_t need = used_;
        if (need > capacity_) {
            if (base_) LOOM_CUDA_CHECK(cudaFree(base_));
            base_ = nullptr;
            LOOM_CUDA_CHECK(cudaMalloc(&base_, need));
            capacity_ = need;
        }
        counting_ = false;
        used_ = 0;
        layout(*this);
    }

    // n elements of U, 256-byte aligned; null while counting.
    template <typename U>
    U* take(int64_t n) {
        const size_t at = used_;
        used_ += (size_t(n) * sizeof(U) + 255) / 256 * 256;
        return counting_ ? nullptr : reinterpret_cast<U*>(static_cast<char*>(base_) + at);
    }

    size_t bytes() const { return capacity_; }

  private:
    void* base_ = nullptr;
    size_t capacity_ = 0, used_ = 0;
    bool counting_ = false;
};

}  // namespace loom
