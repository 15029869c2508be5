// Shared helpers for the CUDA-vs-CPU op tests.
//
// Every test fixture skips (GTEST_SKIP, reason printed) when cudaGetDeviceCount
// fails or finds no device, so the suite builds and passes on GPU-less CI.
// Inputs are drawn in fp32 and rounded to the device type first, so the CPU
// reference and the GPU see exactly the same values; only the kernels' own
// rounding differs. Failures print max abs/rel diff and the first index out of
// tolerance (llm.c's check_tensor).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "ops/cuda/device_ops_cuda.h"
#include "ops/device_ops.h"

namespace loom::test {

// ---- element types on the host ------------------------------------------------
template <typename T>
struct Host;
template <>
struct Host<float> {
    static float to(float x) { return x; }
    static float from(float x) { return x; }
    static constexpr const char* name = "f32";
    static constexpr DType dtype = DType::f32;
};
template <>
struct Host<__nv_bfloat16> {
    static __nv_bfloat16 to(float x) { return __float2bfloat16_rn(x); }
    static float from(__nv_bfloat16 x) { return __bfloat162float(x); }
    static constexpr const char* name = "bf16";
    static constexpr DType dtype = DType::bf16;
};
template <>
struct Host<__half> {
    static __half to(float x) { return __float2half_rn(x); }
    static float from(__half x) { return __half2float(x); }
    static constexpr const char* name = "f16";
    static constexpr DType dtype = DType::f16;
};

// x rounded through T (what the device will see), as float.
template <typename T>
float round_to(float x) {
    return Host<T>::from(Host<T>::to(x));
}
template <typename T>
std::vector<float> round_all(std::vector<float> v) {
    for (float& x : v) x = round_to<T>(x);
    return v;
}

// ---- tolerances, one table ----------------------------------------------------
struct Tol {
    double abs, rel;
};
// Per dtype: fp32 kernels differ from the CPU by summation order only; bf16 and
// f16 keep 8 and 11 significant bits on every stored intermediate.
template <typename T>
Tol tol_for(double f32_abs = 1e-5, double f32_rel = 1e-4) {
    if constexpr (std::is_same_v<T, float>) return {f32_abs, f32_rel};
    if constexpr (std::is_same_v<T, __half>) return {2e-3, 4e-3};
    return {2e-2, 2e-2};
}

// ---- device buffers -----------------------------------------------------------
template <typename T>
class DeviceBuffer {
  public:
    explicit DeviceBuffer(size_t n = 0) { resize(n); }
    ~DeviceBuffer() {
        if (p_) (void)cudaFree(p_);
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    void resize(size_t n) {
        if (p_) LOOM_CUDA_CHECK(cudaFree(p_));
        p_ = nullptr;
        n_ = n;
        if (n) {
            LOOM_CUDA_CHECK(cudaMalloc(&p_, n * sizeof(T)));
            LOOM_CUDA_CHECK(cudaMemset(p_, 0, n * sizeof(T)));
            // NOTE: ops run on a non-blocking stream, which does not wait for the
            // legacy default stream this memset (and upload's memcpy) run on.
            LOOM_CUDA_CHECK(cudaDeviceSynchronize());
        }
    }
    T* get() const { return p_; }
    size_t size() const { return n_; }

  private:
    T* p_ = nullptr;
    size_t n_ = 0;
};

// Uploads float values converted to T.
template <typename T>
std::unique_ptr<DeviceBuffer<T>> upload(const std::vector<float>& v) {
    std::vector<T> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = Host<T>::to(v[i]);
    auto d = std::make_unique<DeviceBuffer<T>>(v.size());
    if (!v.empty())
        LOOM_CUDA_CHECK(
            cudaMemcpy(d->get(), h.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    LOOM_CUDA_CHECK(cudaDeviceSynchronize());  // a pageable h2d copy may still be in flight
    return d;
}
template <typename I>
std::unique_ptr<DeviceBuffer<I>> upload_raw(const std::vector<I>& v) {
    auto d = std::make_unique<DeviceBuffer<I>>(v.size());
    if (!v.empty())
        LOOM_CUDA_CHECK(
            cudaMemcpy(d->get(), v.data(), v.size() * sizeof(I), cudaMemcpyHostToDevice));
    LOOM_CUDA_CHECK(cudaDeviceSynchronize());
    return d;
}
// Downloads as float (waits for all device work, every stream).
template <typename T>
std::vector<float> download(const DeviceBuffer<T>& d) {
    LOOM_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> h(d.size());
    if (d.size())
        LOOM_CUDA_CHECK(
            cudaMemcpy(h.data(), d.get(), d.size() * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> out(h.size());
    for (size_t i = 0; i < h.size(); ++i) out[i] = Host<T>::from(h[i]);
    return out;
}

// ---- random data --------------------------------------------------------------
inline std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(gen);
    return v;
}
inline std::vector<int64_t> random_ids(size_t n, int64_t V, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int64_t> dist(0, V - 1);
    std::vector<int64_t> v(n);
    for (auto& x : v) x = dist(gen);
    return v;
}

// ---- comparison ---------------------------------------------------------------
// Passes when |got - want| <= abs + rel * |want| everywhere (NaNs must match).
inline ::testing::AssertionResult all_close(const std::string& what, const std::vector<float>& got,
                                            const std::vector<float>& want, Tol tol) {
    if (got.size() != want.size())
        return ::testing::AssertionFailure()
               << what << ": size " << got.size() << " != expected " << want.size();
    double max_abs = 0, max_rel = 0;
    int64_t first_bad = -1;
    for (size_t i = 0; i < got.size(); ++i) {
        const double g = got[i], w = want[i];
        if (std::isnan(g) || std::isnan(w)) {
            if (std::isnan(g) != std::isnan(w) && first_bad < 0) first_bad = int64_t(i);
            continue;
        }
        const double d = std::fabs(g - w);
        max_abs = std::max(max_abs, d);
        if (w != 0) max_rel = std::max(max_rel, d / std::fabs(w));
        if (d > tol.abs + tol.rel * std::fabs(w) && first_bad < 0) first_bad = int64_t(i);
    }
    std::ostringstream msg;
    msg << what << ": " << got.size() << " values, max abs diff " << max_abs << ", max rel diff "
        << max_rel << " (tol abs " << tol.abs << ", rel " << tol.rel << ")";
    if (first_bad >= 0) {
        msg << "; first mismatch at [" << first_bad << "]: got " << got[size_t(first_bad)]
            << ", want " << want[size_t(first_bad)];
        return ::testing::AssertionFailure() << msg.str();
    }
    return ::testing::AssertionSuccess() << msg.str();
}

// Exact equality (deterministic kernels, run-to-run checks).
inline ::testing::AssertionResult bit_equal(const std::string& what, const std::vector<float>& a,
                                            const std::vector<float>& b) {
    if (a.size() != b.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
    for (size_t i = 0; i < a.size(); ++i)
        if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
            return ::testing::AssertionFailure()
                   << what << ": differ at [" << i << "]: " << a[i] << " vs " << b[i];
    return ::testing::AssertionSuccess();
}

// ---- fixture ------------------------------------------------------------------
// Skips with the reason when there is no usable GPU; otherwise owns a context.
class CudaOpTest : public ::testing::Test {
  protected:
    void SetUp() override {
        const std::string why = cuda_unavailable_reason();
        if (!why.empty()) GTEST_SKIP() << "no usable CUDA device: " << why;
        ctx_ = std::make_unique<CudaContext>(0);
    }
    void TearDown() override {
        if (ctx_) {
            ctx_->check_device_errors();
            backend_.reset();
            ctx_.reset();
        }
    }
    CudaContext& ctx() { return *ctx_; }
    // The CUDA backend over ctx(), whose table (ops/device_ops.h) the tests call.
    Backend& backend() {
        if (!backend_) backend_ = make_cuda_backend(*ctx_);
        return *backend_;
    }
    // The table's nn entries with activations of type T: op.nn().foo(op, ...).
    template <typename T>
    OpCtx gpu() {
        return OpCtx{&backend(), Host<T>::dtype};
    }

  private:
    std::unique_ptr<CudaContext> ctx_;
    std::unique_ptr<Backend> backend_;
};

template <typename T>
class CudaTypedOpTest : public CudaOpTest {};

using DeviceTypes = ::testing::Types<float, __nv_bfloat16, __half>;

struct TypeNames {
    template <typename T>
    static std::string GetName(int) {
        return Host<T>::name;
    }
};

}  // namespace loom::test
