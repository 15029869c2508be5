// The CPU backend and its kernel table. The CPU keeps no compute copy
// (bf16 operands are rounded per GEMM, ops/matmul.h) and fp32 gradients, so
// an update asked for either is a caller's bug.
#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "ops/device_ops.h"
#include "ops/sgd.h"

namespace loom {

extern constinit const NnOps k_cpu_nn_ops;  // nn_ops_cpu.cpp

namespace {

const float* host_grad(const UpdateBuffers& b, const char* op) {
    LOOM_ASSERT(b.grad_dtype == DType::f32, "{} on the CPU: gradients are fp32, got {}", op,
                dtype_safetensors_name(b.grad_dtype));
    LOOM_ASSERT(b.copy == nullptr, "{} on the CPU: there is no compute copy to refresh", op);
    return static_cast<const float*>(b.grad);
}

void cpu_adamw(Backend&, const UpdateBuffers& b, std::span<const UpdateRun> runs,
               const AdamWParams& hp, int64_t step, float grad_scale) {
    adamw_update_runs(b.master, host_grad(b, "adamw"), b.m, b.v, runs, hp, step, grad_scale);
}

void cpu_sgd(Backend&, const UpdateBuffers& b, std::span<const UpdateRun> runs, double lr,
             double weight_decay, float grad_scale) {
    sgd_update_runs(b.master, host_grad(b, "sgd"), runs, lr, weight_decay, grad_scale);
}

void cpu_lamb_moments(Backend&, const UpdateBuffers& b, const LambPlanView& p, const LambStep& s,
                      float grad_scale) {
    lamb_moments(b.master, host_grad(b, "lamb"), b.m, b.v, p.tiles, p.n_tiles, p.row_begin, p.rows,
                 p.tile_sums, p.row_sums, s, grad_scale);
}

void cpu_lamb_apply(Backend&, const UpdateBuffers& b, const LambPlanView& p, const LambStep& s,
                    double lr) {
    LOOM_ASSERT(b.copy == nullptr, "lamb on the CPU: there is no compute copy to refresh");
    lamb_apply(b.master, b.m, b.v, p.tiles, p.n_tiles, p.row_sums, s, lr);
}

// Constant-initialised: safe to reach from any static constructor.
constexpr DeviceOps k_cpu_ops{Device::cpu,      cpu_adamw,      cpu_sgd,
                              cpu_lamb_moments, cpu_lamb_apply, &k_cpu_nn_ops};

class CpuBackend final : public Backend {
  public:
    CpuBackend() : Backend(k_cpu_ops) {}
    Device device() const override { return Device::cpu; }
    std::string name() const override { return "cpu"; }
    std::shared_ptr<Storage> alloc(size_t nbytes) override {
        return Storage::alloc(std::max<size_t>(nbytes, 1));
    }
    void to_device(void* dst, const void* host, size_t nbytes) override {
        if (nbytes) std::memcpy(dst, host, nbytes);
    }
    void to_host(void* host, const void* src, size_t nbytes) override {
        if (nbytes) std::memcpy(host, src, nbytes);
    }
    void copy(void* dst, const void* src, size_t nbytes) override {
        if (nbytes) std::memmove(dst, src, nbytes);
    }
    void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                 size_t rows) override {
        for (size_t k = 0; k < rows; ++k)
            std::memcpy(static_cast<char*>(dst) + k * dst_pitch,
                        static_cast<const char*>(src) + k * src_pitch, row_bytes);
    }
    void zero(void* p, size_t nbytes) override {
        if (nbytes) std::memset(p, 0, nbytes);
    }
    void synchronize() override {}
};

}  // namespace

Backend& cpu_backend() {
    static CpuBackend backend;
    return backend;
}

}  // namespace loom
