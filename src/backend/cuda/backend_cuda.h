// BackendCuda: device discovery, device memory as Storage, copies, streams and events.
//
// Host-only code (no kernels), compiled by the host compiler. Device memory is a
// Storage with Device::cuda whose release callback calls cudaFree, so a Tensor
// viewing GPU memory is the same value type as a CPU one; kernels take raw
// pointers from Tensor::raw(). Nothing here picks a device behind the caller's
// back: every call names the stream or device it works on.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "core/tensor.h"

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

class BackendCuda {
  public:
    explicit BackendCuda(int device = 0);
    int device() const { return device_; }
    std::string name() const;  // "cuda:0 (NVIDIA H100 ...)"

    // Device memory as Storage (Device::cuda); zero-filled when `zero` (synchronously).
    std::shared_ptr<Storage> alloc(size_t nbytes, bool zero = true) const;
    // A zero-filled tensor in device memory.
    Tensor empty(DType dtype, Shape shape, std::string name = {}) const;

    // Copies between tensors of equal dtype and element count; either side may be
    // CPU or CUDA. Asynchronous on `stream` (pageable host memory makes h2d
    // effectively synchronous, as the CUDA runtime documents).
    void copy(const Tensor& dst, const Tensor& src, cudaStream_t stream) const;
    void memset_zero(const Tensor& t, cudaStream_t stream) const;
    void synchronize() const;

    // Convenience for tests and I/O: synchronous round trips.
    Tensor to_device(const Tensor& cpu, cudaStream_t stream) const;
    Tensor to_host(const Tensor& gpu, cudaStream_t stream) const;

  private:
    int device_ = 0;
};

}  // namespace loom
