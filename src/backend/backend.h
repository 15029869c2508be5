// Backend: the device seam under the ops (ggml's backend interface). One
// Backend is one device and one stream: it hands out memory, copies to and
// from the host, and orders work; Backend::ops() is the table of kernels the
// device-neutral code above the ops calls (ops/device_ops.h).
//
// Invariant: code above the ops never dereferences memory a Backend handed
// out unless device() is Device::cpu; everything else crosses with
// to_device/to_host, at the edges (load, checkpoint, export, metrics).
// Implementations: cpu_backend() (ops/device_ops_cpu.cpp) and the CUDA one
// (ops/cuda/device_ops_cuda.h), each binding its device's kernels.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/storage.h"

namespace loom {

struct DeviceOps;   // ops/device_ops.h
class CudaContext;  // backend/cuda/cuda_context.h, CUDA builds only

class Backend {
  public:
    virtual ~Backend() = default;
    Backend(const Backend&) = delete;
    Backend& operator=(const Backend&) = delete;

    virtual Device device() const = 0;
    // True when the host may read and write this backend's memory directly
    // (the CPU): a ParamTable then keeps no staging copy.
    virtual bool host_addressable() const { return device() == Device::cpu; }
    virtual std::string name() const = 0;
    // Zero-filled device memory (at least one byte), freed with the Storage.
    virtual std::shared_ptr<Storage> alloc(size_t nbytes) = 0;
    // Host -> device, ordered on the stream; `host` must stay valid until
    // the next synchronize().
    virtual void to_device(void* dst, const void* host, size_t nbytes) = 0;
    // Device -> host, ordered on the stream; done when the call returns.
    virtual void to_host(void* host, const void* src, size_t nbytes) = 0;
    // Device -> device on the stream.
    virtual void copy(void* dst, const void* src, size_t nbytes) = 0;
    // Device -> device, `rows` rows of `row_bytes`, the k-th from
    // src + k * src_pitch to dst + k * dst_pitch (a strided view's copy: a
    // column of logits, token 0 of every sample). Rows must not overlap.
    virtual void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                         size_t row_bytes, size_t rows) = 0;
    virtual void zero(void* p, size_t nbytes) = 0;
    virtual void synchronize() = 0;

    // Activation offloading (models/act_offload.h) moves saved activations
    // to host memory and back while compute goes on: a second queue for
    // those copies, and markers that order one queue after a point of the
    // other (a GPU's second stream and its events). The defaults, for a
    // backend whose work is done when its call returns (the CPU), copy at
    // once and need no order; synchronize() also waits for the copy queue.
    enum class Queue { compute, copy };
    class Marker {
      public:
        virtual ~Marker() = default;
    };
    virtual std::unique_ptr<Marker> new_marker() { return std::make_unique<Marker>(); }
    // Marks the point `q` has reached (work enqueued on it so far).
    virtual void mark(Marker&, Queue /*q*/) {}
    // Work enqueued on `q` from now on starts after the marked point.
    virtual void wait_for(Queue /*q*/, const Marker&) {}
    // Host memory the copy queue moves to and from (page-locked on a GPU).
    virtual std::shared_ptr<Storage> alloc_host(size_t nbytes) { return Storage::alloc(nbytes); }
    // Device -> host and host -> device on the copy queue.
    virtual void copy_out(void* host, const void* src, size_t nbytes) {
        to_host(host, src, nbytes);
    }
    virtual void copy_back(void* dst, const void* host, size_t nbytes) {
        to_device(dst, host, nbytes);
    }
    // The context CUDA kernels on this backend take (null off CUDA).
    virtual CudaContext* cuda() { return nullptr; }

    const DeviceOps& ops() const { return *ops_; }

  protected:
    explicit Backend(const DeviceOps& ops) : ops_(&ops) {}

  private:
    const DeviceOps* ops_;
};

}  // namespace loom
