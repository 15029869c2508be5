// The CPU backend and its kernel table. The CPU keeps no compute copy
// (bf16 operands are rounded per GEMM, ops/matmul.h) and fp32 gradients, so
// an update asked for either is a caller's bug.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "ops/device_ops.h"
#include "ops/gemm.h"
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

void cpu_convert(Backend&, void* dst, DType dt, const void* src, DType st, int64_t n) {
    if (n <= 0) return;
    if (dt == st) {
        std::memcpy(dst, src, size_t(n) * dtype_size(dt));
        return;
    }
    auto* d16 = static_cast<uint16_t*>(dst);
    const auto* s16 = static_cast<const uint16_t*>(src);
    auto* d32 = static_cast<float*>(dst);
    const auto* s32 = static_cast<const float*>(src);
    if (dt == DType::bf16 && st == DType::f32) return convert_f32_to_bf16(d16, s32, n);
    if (dt == DType::f32 && st == DType::bf16) return convert_bf16_to_f32(d32, s16, n);
    if (dt == DType::f16 && st == DType::f32) {
        for (int64_t i = 0; i < n; ++i) d16[i] = f32_to_f16(s32[i]);
        return;
    }
    LOOM_ASSERT(dt == DType::f32 && st == DType::f16, "convert from {} to {} on the CPU",
                dtype_name(st), dtype_name(dt));
    for (int64_t i = 0; i < n; ++i) d32[i] = f16_to_f32(s16[i]);
}

// Fixed 64K-element chunks summed in order: the bits do not depend on the
// thread count.
constexpr int64_t k_chunk = 1 << 16;

double sum_sq(const float* g, int64_t n) {
    const int64_t chunks = (n + k_chunk - 1) / k_chunk;
    std::vector<double> partial(size_t(chunks), 0.0);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; ++c) {
        const int64_t b = c * k_chunk, e = std::min(n, b + k_chunk);
        double s = 0;
        for (int64_t i = b; i < e; ++i) s += double(g[i]) * double(g[i]);
        partial[size_t(c)] = s;
    }
    double s = 0;
    for (double p : partial) s += p;
    return s;
}

void cpu_sum_squares(Backend&, const void* x, DType t,
                     std::span<const std::pair<int64_t, int64_t>> ranges, double* parts) {
    LOOM_ASSERT(t == DType::f32, "sum of squares of {} values on the CPU", dtype_name(t));
    const auto* g = static_cast<const float*>(x);
    for (size_t k = 0; k < ranges.size(); ++k)
        parts[k] = sum_sq(g + ranges[k].first, ranges[k].second - ranges[k].first);
}

void cpu_scale(Backend&, void* x, DType t, int64_t n, float s) {
    LOOM_ASSERT(t == DType::f32, "scale of {} values on the CPU", dtype_name(t));
    auto* g = static_cast<float*>(x);
#pragma omp parallel for schedule(dynamic, 8192) if (n > k_chunk)
    for (int64_t k = 0; k < n; ++k) g[k] *= s;
}

// Constant-initialised: safe to reach from any static constructor.
constexpr DeviceOps k_cpu_ops{.device = Device::cpu,
                              .adamw = cpu_adamw,
                              .sgd = cpu_sgd,
                              .lamb_moments = cpu_lamb_moments,
                              .lamb_apply = cpu_lamb_apply,
                              .convert = cpu_convert,
                              .sum_squares = cpu_sum_squares,
                              .scale = cpu_scale,
                              .nn = &k_cpu_nn_ops};

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
