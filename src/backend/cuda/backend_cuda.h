// CUDA device discovery, and RAII streams and events.
//
// Host-only code (no kernels), compiled by the host compiler. The Backend of a
// GPU (memory, copies, the copy queue) is ops/cuda/device_ops_cuda.h's.
// Nothing here picks a device behind the caller's back: every call names the
// stream or device it works on.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

namespace loom {

// Visible CUDA devices; 0 (never a throw) when there is no driver or no GPU.
int cuda_device_count();
// Why CUDA cannot be used here ("cudaGetDeviceCount: no CUDA-capable device is
// detected"), or "" when at least one device is usable.
std::string cuda_unavailable_reason();

struct CudaDeviceInfo {
    std::string name;
    int cc_major = 0, cc_minor = 0;
    int sm_count = 0;
    size_t total_bytes = 0;
    std::string to_string() const;  // "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)"
};
CudaDeviceInfo cuda_device_info(int device);

// RAII stream and event (non-blocking stream, timing-free event by default).
class CudaStream {
  public:
    CudaStream();
    ~CudaStream();
    CudaStream(const CudaStream&) = delete;
    CudaStream& operator=(const CudaStream&) = delete;
    cudaStream_t get() const { return s_; }
    void synchronize() const;

  private:
    cudaStream_t s_ = nullptr;
};

class CudaEvent {
  public:
    explicit CudaEvent(bool timing = false);
    ~CudaEvent();
    CudaEvent(const CudaEvent&) = delete;
    CudaEvent& operator=(const CudaEvent&) = delete;
    cudaEvent_t get() const { return e_; }
    void record(cudaStream_t s);
    // Makes `s` wait for this event (no host block): how a comm stream orders
    // itself after compute, as in llm.c's NCCL overlap.
    void wait_on(cudaStream_t s) const;
    void synchronize() const;
    // Milliseconds between `start` and this event (both created with timing).
    float elapsed_ms_since(const CudaEvent& start) const;

  private:
    cudaEvent_t e_ = nullptr;
};

}  // namespace loom
