// CudaContext: what every CUDA op receives as its last argument.
//
// One per (device, stream): the stream ops are ordered on, the cuBLAS(Lt)
// handles, a growable scratch region and a device-side error record. Passed by
// reference, never global (principle 5). Kernels cannot throw, so a kernel that
// meets bad input (an embedding id outside [0, V), a target outside [0, V))
// writes the first such fact to the error record and carries on; the host
// learns of it at check_device_errors(), which the ops that already synchronise
// (softmax_xent_forward_cuda) call themselves and a trainer calls once per step.
//
// NOTE: scratch() hands out one region that stays valid until the next call.
// An op carves every buffer it needs from a single call; helpers it calls get
// pointers, never call scratch() themselves.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace loom {

class CublasHandle;

enum DeviceErrorCode : int32_t {
    k_device_ok = 0,
    k_device_embedding_id_out_of_range = 1,  // a = row, b = id, c = V
    k_device_xent_target_out_of_range = 2,   // a = row, b = target, c = V
};

// First error a kernel met since the last check (device memory).
struct DeviceErrorRecord {
    int32_t code;
    int32_t pad;
    long long a, b, c;
};

class CudaContext {
  public:
    // stream = nullptr creates (and owns) a non-blocking stream on `device`.
    explicit CudaContext(int device = 0, cudaStream_t stream = nullptr);
    ~CudaContext();
    CudaContext(const CudaContext&) = delete;
    CudaContext& operator=(const CudaContext&) = delete;

    int device() const { return device_; }
    cudaStream_t stream() const { return stream_; }
    CublasHandle& blas() { return *blas_; }
    int sm_count() const { return sm_count_; }

    // At least `nbytes` of device memory, 256-byte aligned, valid until the next
    // call. Growing waits for the stream (the old region may still be in use).
    void* scratch(size_t nbytes);
    DeviceErrorRecord* device_errors() const { return errors_; }

    // Waits for the stream; throws loom::Error describing the first kernel-side error.
    void check_device_errors();
    void synchronize();

  private:
    int device_ = 0;
    int sm_count_ = 0;
    cudaStream_t stream_ = nullptr;
    bool owns_stream_ = false;
    std::unique_ptr<CublasHandle> blas_;
    void* scratch_ = nullptr;
    size_t scratch_bytes_ = 0;
    DeviceErrorRecord* errors_ = nullptr;
};

// Carves consecutive 256-byte-aligned buffers out of one scratch region.
class ScratchCarver {
  public:
    explicit ScratchCarver(void* base) : base_(static_cast<char*>(base)) {}
    template <typename T>
    T* take(int64_t n) {
        T* p = reinterpret_cast<T*>(base_ + used_);
        used_ += align(size_t(n) * sizeof(T));
        return p;
    }
    // Bytes the same sequence of take() calls needs (call on a null base first).
    size_t used() const { return used_; }
    static size_t align(size_t n) { return (n + 255) / 256 * 256; }

  private:
    char* base_;
    size_t used_ = 0;
};

}  // namespace loom
