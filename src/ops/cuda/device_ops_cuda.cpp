// The CUDA backend and its kernel table (device_ops_cuda.h).
//
// The entries are defined beside their kernels (entries_cuda.h), each
// dispatching on the activation type, the optimizer updates on the gradient
// and compute-copy types. Activations, the parameters' compute copy and
// gradients all share that type, so a GEMM's and attention's operands are the
// activations themselves: `operands` must equal OpCtx::act. The row-subset
// entries (dropout_rows, attention_rows_*) have no kernels here and are null,
// so a block computes every row. The loss entries synchronise. Attention takes
// no sliding window here (attention_window false), so Mistral with a window
// stays on the CPU.
#include "ops/cuda/device_ops_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda_check.h"
#include "core/check.h"
#include "ops/cuda/entries_cuda.h"
#include "ops/device_ops.h"

namespace loom {

void cuda_bad_type(DType t, const char* what) {
    assert_fail(__FILE__, __LINE__, "a floating-point type",
                fmt::format("{}: {} values on CUDA", what, dtype_name(t)));
}

CudaContext& cuda::context(Backend& be) {
    CudaContext* c = be.cuda();
    LOOM_ASSERT(c != nullptr, "a CUDA kernel called with the {} backend", be.name());
    return *c;
}

void cuda::check_act_type(const OpCtx& c, DType operands, const char* op) {
    LOOM_ASSERT(operands == c.act,
                "{} on CUDA with {} operands and {} activations: CUDA keeps activations in the "
                "compute type",
                op, dtype_name(operands), dtype_name(c.act));
}

void cuda::check_attention(const OpCtx& c, DType operands, const AttnMask& m, const char* op) {
    check_act_type(c, operands, op);
    // Mistral's sliding window has no CUDA kernel yet; the Llama family refuses
    // this table before any attention runs.
    LOOM_CHECK(m.window < 0, "{}: the CUDA attention kernels take no sliding window", op);
}

void cuda::check_update_types(const UpdateBuffers& b) {
    const DType t = b.copy ? b.copy_dtype : b.grad_dtype;
    LOOM_ASSERT(b.grad_dtype == DType::f32 || b.grad_dtype == t,
                "an update with {} gradients and a {} compute copy",
                dtype_safetensors_name(b.grad_dtype), dtype_safetensors_name(t));
}

namespace {

constexpr NnOps k_cuda_nn_ops{
    .matmul_forward = cuda::matmul_forward,
    .matmul_backward = cuda::matmul_backward,
    .layer_norm_forward = cuda::layer_norm_forward,
    .layer_norm_backward = cuda::layer_norm_backward,
    .activation_forward = cuda::activation_forward,
    .activation_backward = cuda::activation_backward,
    .dropout_forward = cuda::dropout_forward,
    .dropout_backward = cuda::dropout_backward,
    .dropout_rows = nullptr,
    .residual_forward = cuda::residual_forward,
    .add_inplace = cuda::add_inplace,
    .add_bias = cuda::add_bias,
    .embedding_forward = cuda::embedding_forward,
    .embedding_backward = cuda::embedding_backward,
    .attention_forward = cuda::attention_forward,
    .attention_backward = cuda::attention_backward,
    .fused_attention_supported = cuda::fused_attention_supported,
    .fused_attention_forward = cuda::fused_attention_forward,
    .fused_attention_backward = cuda::fused_attention_backward,
    .attention_rows_forward = nullptr,
    .attention_rows_backward = nullptr,
    .softmax_xent_forward = cuda::softmax_xent_forward,
    .softmax_xent_backward = cuda::softmax_xent_backward,
    .vocab_embedding_forward = cuda::vocab_embedding_forward,
    .vocab_embedding_backward = cuda::vocab_embedding_backward,
    .vocab_xent_max = cuda::vocab_xent_max,
    .vocab_xent_stats = cuda::vocab_xent_stats,
    .vocab_xent_loss = cuda::vocab_xent_loss,
    .vocab_xent_backward = cuda::vocab_xent_backward,
    .rms_norm_forward = cuda::rms_norm_forward,
    .rms_norm_backward = cuda::rms_norm_backward,
    .rope = cuda::rope,
    .repeat_kv_forward = cuda::repeat_kv_forward,
    .repeat_kv_backward = cuda::repeat_kv_backward,
    .swiglu_forward = cuda::swiglu_forward,
    .swiglu_backward = cuda::swiglu_backward,
};

constexpr DeviceOps k_cuda_ops{.device = Device::cuda,
                               .adamw = cuda::adamw,
                               .sgd = cuda::sgd,
                               .lamb_moments = cuda::lamb_moments,
                               .lamb_apply = cuda::lamb_apply,
                               .convert = cuda::convert,
                               .sum_squares = cuda::sum_squares,
                               .scale = cuda::scale,
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
