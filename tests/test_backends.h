// The backends the device-neutral tests run on, by name:
// - "cpu": cpu_backend();
// - "staged": host memory and the CPU's kernels behind a backend that says
//   its memory is not host-addressable, so a ParamTable keeps a staging copy
//   and every host read or write must cross with upload/download, as on a
//   GPU. A path that forgot a transfer reads stale (or poisoned) staging and
//   fails the same expectations the CPU run meets. Its table adds the
//   reference fused attention (fused_attention_reference.h), so models on it
//   take the fused path a GPU takes, with the CPU's results.
// - "cuda" (builds with LOOM_TEST_CUDA): device 0 on its own stream; a test
//   on it skips where no GPU is visible (skip_if_absent).
// A suite takes the name as a parameter (ggml's test-backend-ops idea, over
// whole models) and builds its model with placement.device on that backend.
#pragma once

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/storage.h"
#include "fused_attention_reference.h"
#include "nn/param_table.h"
#include "ops/device_ops.h"

#ifdef LOOM_TEST_CUDA
#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda_context.h"
#include "ops/cuda/device_ops_cuda.h"
#endif

namespace loom::test {

class StagedBackend final : public Backend {
  public:
    StagedBackend() : Backend(cpu_ops_with_fused_attention()) {}
    Device device() const override { return Device::cpu; }
    bool host_addressable() const override { return false; }
    std::string name() const override { return "staged"; }
    std::shared_ptr<Storage> alloc(size_t nbytes) override { return Storage::alloc(nbytes); }
    void to_device(void* dst, const void* host, size_t nbytes) override {
        uploaded += nbytes;
        if (nbytes) std::memcpy(dst, host, nbytes);
    }
    void to_host(void* host, const void* src, size_t nbytes) override {
        downloaded += nbytes;
        if (nbytes) std::memcpy(host, src, nbytes);
    }
    void copy(void* dst, const void* src, size_t nbytes) override {
        if (nbytes) std::memmove(dst, src, nbytes);
    }
    void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                 size_t rows) override {
        cpu_backend().copy_2d(dst, dst_pitch, src, src_pitch, row_bytes, rows);
    }
    void zero(void* p, size_t nbytes) override {
        if (nbytes) std::memset(p, 0, nbytes);
    }
    void synchronize() override {}

    size_t uploaded = 0, downloaded = 0;
};

inline std::vector<std::string> test_backend_names() {
#ifdef LOOM_TEST_CUDA
    return {"cpu", "staged", "cuda"};
#else
    return {"cpu", "staged"};
#endif
}

// Why `name` cannot run here (a GPU backend without a GPU), or "": the
// caller skips with the reason.
inline std::string backend_absent_reason(const std::string& name) {
#ifdef LOOM_TEST_CUDA
    if (name == "cuda") return cuda_unavailable_reason();
#else
    (void)name;
#endif
    return "";
}

// One backend per name for the whole test binary.
inline Backend& test_backend(const std::string& name) {
    static StagedBackend staged;
    if (name == "staged") return staged;
#ifdef LOOM_TEST_CUDA
    if (name == "cuda") {
        static CudaContext ctx(0);
        static const std::unique_ptr<Backend> cuda = make_cuda_backend(ctx);
        return *cuda;
    }
#endif
    return cpu_backend();
}

// NaN over the host copies of a staged table, so a forward or an update
// that read them instead of the backend's buffers shows.
inline void poison_host_copies(const ParamTable& t) {
    if (!t.staged()) return;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::fill(t.params_data(), t.params_data() + t.flat_numel(), nan);
    std::fill(t.grads_data(), t.grads_data() + t.flat_numel(), nan);
}

}  // namespace loom::test
