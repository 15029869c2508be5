// The CUDA backend and its kernel table (device_ops_cuda.h).
#include "ops/cuda/device_ops_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda_check.h"
#include "core/check.h"
#include "ops/cuda/adamw_cuda.h"
#include "ops/cuda/elementwise_cuda.h"
#include "ops/cuda/float_dispatch.h"
#include "ops/cuda/lamb_cuda.h"
#include "ops/cuda/sgd_cuda.h"
#include "ops/device_ops.h"

namespace loom {

extern constinit const NnOps k_cuda_nn_ops;  // nn_ops_cuda.cpp

namespace {

CudaContext& context(Backend& be) {
    CudaContext* c = be.cuda();
    LOOM_ASSERT(c != nullptr, "a CUDA kernel called with the {} backend", be.name());
    return *c;
}

// Calls f(G{}, T{}) with G the gradient type and T the compute copy's type
// (float when there is no copy and the gradients are fp32). A compute-type
// gradient implies a copy of that type.
template <typename F>
void with_types(const UpdateBuffers& b, F&& f) {
    const DType t = b.copy ? b.copy_dtype : b.grad_dtype;
    LOOM_ASSERT(b.grad_dtype == DType::f32 || b.grad_dtype == t,
                "an update with {} gradients and a {} compute copy",
                dtype_safetensors_name(b.grad_dtype), dtype_safetensors_name(t));
    switch (t) {
        case DType::f32:
            return f(float{}, float{});
        case DType::bf16:
            if (b.grad_dtype == DType::f32) return f(float{}, __nv_bfloat16{});
            return f(__nv_bfloat16{}, __nv_bfloat16{});
        case DType::f16:
            if (b.grad_dtype == DType::f32) return f(float{}, __half{});
            return f(__half{}, __half{});
        default:
            LOOM_ASSERT(false, "an update with a {} compute copy", dtype_safetensors_name(t));
    }
}

void cuda_adamw(Backend& be, const UpdateBuffers& b, std::span<const UpdateRun> runs,
                const AdamWParams& hp, int64_t step, float grad_scale) {
    CudaContext& ctx = context(be);
    with_types(b, [&](auto g0, auto t0) {
        using G = decltype(g0);
        using T = decltype(t0);
        const G* g = static_cast<const G*>(b.grad);
        T* copy = static_cast<T*>(b.copy);
        for (const UpdateRun& r : runs) {
            AdamWParams h = hp;
            if (!r.decay) h.weight_decay = 0.0;
            if constexpr (std::is_same_v<T, float>)
                adamw_update_cuda(b.master + r.param_offset, g + r.state_offset,
                                  b.m + r.state_offset, b.v + r.state_offset, r.n, h, step, ctx,
                                  grad_scale);
            else
                adamw_update_mixed_cuda<G, T>(b.master + r.param_offset, g + r.state_offset,
                                              b.m + r.state_offset, b.v + r.state_offset,
                                              copy ? copy + r.param_offset : nullptr, r.n, h, step,
                                              ctx, grad_scale);
        }
    });
}

void cuda_sgd(Backend& be, const UpdateBuffers& b, std::span<const UpdateRun> runs, double lr,
              double weight_decay, float grad_scale) {
    CudaContext& ctx = context(be);
    with_types(b, [&](auto g0, auto t0) {
        using G = decltype(g0);
        using T = decltype(t0);
        const G* g = static_cast<const G*>(b.grad);
        T* copy = static_cast<T*>(b.copy);
        for (const UpdateRun& r : runs)
            sgd_update_cuda<G, T>(b.master + r.param_offset, g + r.state_offset,
                                  copy ? copy + r.param_offset : nullptr, r.n, lr,
                                  r.decay ? weight_decay : 0.0, ctx, grad_scale);
    });
}

void cuda_lamb_moments(Backend& be, const UpdateBuffers& b, const LambPlanView& p,
                       const LambStep& s, float grad_scale) {
    CudaContext& ctx = context(be);
    with_types(b, [&](auto g0, auto) {
        using G = decltype(g0);
        lamb_moments_cuda<G>(b.master, static_cast<const G*>(b.grad), b.m, b.v, p.tiles, p.n_tiles,
                             p.row_begin, p.rows, p.tile_sums, p.row_sums, s, ctx, grad_scale);
    });
}

void cuda_lamb_apply(Backend& be, const UpdateBuffers& b, const LambPlanView& p, const LambStep& s,
                     double lr) {
    CudaContext& ctx = context(be);
    with_types(b, [&](auto, auto t0) {
        using T = decltype(t0);
        lamb_apply_cuda<T>(b.master, static_cast<T*>(b.copy), b.m, b.v, p.tiles, p.n_tiles,
                           p.row_sums, s, lr, ctx);
    });
}

void cuda_convert(Backend& be, void* dst, DType dt, const void* src, DType st, int64_t n) {
    CudaContext& ctx = context(be);
    if (dt == st) {
        if (n > 0)
            LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * dtype_size(dt),
                                            cudaMemcpyDeviceToDevice, ctx.stream()));
        return;
    }
    // One side is f32 (the instantiated pairs: elementwise_cuda.cu).
    if (st == DType::f32)
        return with_float_type(dt, "convert", [&](auto d0) {
            using D = decltype(d0);
            if constexpr (!std::is_same_v<D, float>)
                convert_cuda<D, float>(static_cast<D*>(dst), static_cast<const float*>(src), n,
                                       ctx);
        });
    LOOM_ASSERT(dt == DType::f32, "convert from {} to {} on CUDA", dtype_name(st), dtype_name(dt));
    with_float_type(st, "convert", [&](auto s0) {
        using S = decltype(s0);
        if constexpr (!std::is_same_v<S, float>)
            convert_cuda<float, S>(static_cast<float*>(dst), static_cast<const S*>(src), n, ctx);
    });
}

void cuda_sum_squares(Backend& be, const void* x, DType t,
                      std::span<const std::pair<int64_t, int64_t>> ranges, double* parts) {
    if (ranges.empty()) return;
    CudaContext& ctx = context(be);
    // One scratch carving for the partial sums and every range's result: a
    // fresh allocation per call would be freed with cudaFree, which waits for
    // the whole device at every gradient norm.
    ScratchCarver plan(nullptr);
    plan.take<double>(k_sum_squares_partials);
    plan.take<double>(int64_t(ranges.size()));
    ScratchCarver carve(ctx.scratch(plan.used()));
    double* partial = carve.take<double>(k_sum_squares_partials);
    double* dev = carve.take<double>(int64_t(ranges.size()));
    with_float_type(t, "sum of squares", [&](auto t0) {
        using T = decltype(t0);
        const T* base = static_cast<const T*>(x);
        // Stream order lets each range reuse the partial sums of the one before.
        for (size_t k = 0; k < ranges.size(); ++k)
            sum_squares_cuda<T>(base + ranges[k].first, ranges[k].second - ranges[k].first, dev + k,
                                partial, ctx);
    });
    LOOM_CUDA_CHECK(cudaMemcpyAsync(parts, dev, ranges.size() * sizeof(double),
                                    cudaMemcpyDeviceToHost, ctx.stream()));
    ctx.synchronize();
}

void cuda_scale(Backend& be, void* x, DType t, int64_t n, float s) {
    CudaContext& ctx = context(be);
    with_float_type(t, "scale", [&](auto t0) {
        using T = decltype(t0);
        scale_inplace_cuda<T>(static_cast<T*>(x), s, n, ctx);
    });
}

constexpr DeviceOps k_cuda_ops{.device = Device::cuda,
                               .adamw = cuda_adamw,
                               .sgd = cuda_sgd,
                               .lamb_moments = cuda_lamb_moments,
                               .lamb_apply = cuda_lamb_apply,
                               .convert = cuda_convert,
                               .sum_squares = cuda_sum_squares,
                               .scale = cuda_scale,
                               .nn = &k_cuda_nn_ops};

class CudaBackend final : public Backend {
  public:
    explicit CudaBackend(CudaContext& ctx) : Backend(k_cuda_ops), ctx_(ctx) {}
    Device device() const override { return Device::cuda; }
    std::string name() const override {
        return "cuda:" + std::to_string(ctx_.device()) + " (" +
               cuda_device_info(ctx_.device()).name + ")";
    }
    std::shared_ptr<Storage> alloc(size_t nbytes) override {
        nbytes = std::max<size_t>(nbytes, 1);
        void* p = nullptr;
        LOOM_CUDA_CHECK(cudaMalloc(&p, nbytes));
        // On the backend's stream, not cudaMemset's legacy default stream:
        // the stream is non-blocking, so a default-stream memset could land
        // after the first upload into this memory and wipe it.
        LOOM_CUDA_CHECK(cudaMemsetAsync(p, 0, nbytes, ctx_.stream()));
        return Storage::wrap(
            p, nbytes, [p] { (void)cudaFree(p); }, Device::cuda);
    }
    void to_device(void* dst, const void* host, size_t nbytes) override {
        if (nbytes)
            LOOM_CUDA_CHECK(
                cudaMemcpyAsync(dst, host, nbytes, cudaMemcpyHostToDevice, ctx_.stream()));
    }
    void to_host(void* host, const void* src, size_t nbytes) override {
        if (nbytes)
            LOOM_CUDA_CHECK(
                cudaMemcpyAsync(host, src, nbytes, cudaMemcpyDeviceToHost, ctx_.stream()));
        ctx_.synchronize();
    }
    void copy(void* dst, const void* src, size_t nbytes) override {
        if (nbytes)
            LOOM_CUDA_CHECK(
                cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, ctx_.stream()));
    }
    void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                 size_t rows) override {
        if (row_bytes && rows)
            LOOM_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows,
                                              cudaMemcpyDeviceToDevice, ctx_.stream()));
    }
    void zero(void* p, size_t nbytes) override {
        if (nbytes) LOOM_CUDA_CHECK(cudaMemsetAsync(p, 0, nbytes, ctx_.stream()));
    }
    void synchronize() override {
        ctx_.synchronize();
        if (copy_) copy_->synchronize();
    }
    CudaContext* cuda() override { return &ctx_; }

    std::unique_ptr<Marker> new_marker() override { return std::make_unique<CudaMarker>(); }
    void mark(Marker& m, Queue q) override { static_cast<CudaMarker&>(m).event.record(stream(q)); }
    void wait_for(Queue q, const Marker& m) override {
        static_cast<const CudaMarker&>(m).event.wait_on(stream(q));
    }
    std::shared_ptr<Storage> alloc_host(size_t nbytes) override {
        nbytes = std::max<size_t>(nbytes, 1);
        void* p = nullptr;
        LOOM_CUDA_CHECK(cudaMallocHost(&p, nbytes));
        return Storage::wrap(
            p, nbytes, [p] { (void)cudaFreeHost(p); }, Device::cpu);
    }
    void copy_out(void* host, const void* src, size_t nbytes) override {
        if (nbytes)
            LOOM_CUDA_CHECK(
                cudaMemcpyAsync(host, src, nbytes, cudaMemcpyDeviceToHost, stream(Queue::copy)));
    }
    void copy_back(void* dst, const void* host, size_t nbytes) override {
        if (nbytes)
            LOOM_CUDA_CHECK(
                cudaMemcpyAsync(dst, host, nbytes, cudaMemcpyHostToDevice, stream(Queue::copy)));
    }

  private:
    // A never-recorded event is complete: waiting on it passes at once.
    struct CudaMarker final : Marker {
        CudaEvent event{false};
    };
    cudaStream_t stream(Queue q) {
        if (q == Queue::compute) return ctx_.stream();
        if (!copy_) copy_ = std::make_unique<CudaStream>();
        return copy_->get();
    }
    CudaContext& ctx_;
    std::unique_ptr<CudaStream> copy_;  // the copy queue, made on first use
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(CudaContext& ctx) {
    return std::make_unique<CudaBackend>(ctx);
}

}  // namespace loom
