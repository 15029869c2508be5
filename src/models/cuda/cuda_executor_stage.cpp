// CudaExecutor: what a pipeline stage needs beyond its forward and backward
// (those are in cuda_executor.cpp): its output and input gradient on the
// device, instances sharing the owner's buffers (one set of activations per
// micro-batch in flight), message buffers, and the packing of shared rows'
// gradients for their sum over pp.
//
// Instances run on the owner's stream, so their forwards and backwards, the
// gradients they accumulate into the shared buffer, and the pp collectives
// (attach_group) are ordered by the one stream; no event crosses instances.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "core/check.h"
#include "models/cuda/cuda_executor.h"

#if defined(LOOM_HAVE_NCCL)
#include "comm/cuda/comm_nccl.h"
#endif

namespace loom {

template <typename T>
const void* CudaExecutor<T>::stage_output() const {
    LOOM_CHECK(!with_head_, "stage_output: this part ends with the head (it has a loss)");
    LOOM_CHECK(planned_B_ >= 0, "stage_output before any forward");
    return hidden_at(app_end_);
}

template <typename T>
const void* CudaExecutor<T>::stage_input_grad() const {
    LOOM_CHECK(!with_embeddings_,
               "stage_input_grad: this part starts with the embeddings (no input gradient)");
    LOOM_CHECK(planned_B_ >= 0, "stage_input_grad before any backward");
    return dh_;
}

template <typename T>
std::unique_ptr<CudaModel> CudaExecutor<T>::make_instance(Model& cpu) {
    check_owner("make_instance");
    // No hook: the owner's data-parallel sync reduces after the pipeline's
    // last backward, from the shared buffer.
    return std::make_unique<CudaExecutor<T>>(cpu, options_, this);
}

template <typename T>
void CudaExecutor<T>::check_owner(const char* what) const {
    LOOM_CHECK(owner_ == nullptr,
               "{}: this CUDA executor is a pipeline instance; its parameters and optimizer "
               "belong to the executor that made it",
               what);
}

template <typename T>
void* CudaExecutor<T>::message_buffer(int64_t key, int64_t bytes) {
    LOOM_CHECK(bytes >= 0, "message_buffer: {} bytes", bytes);
    auto& [ptr, have] = messages_[key];
    if (ptr && have >= bytes) return ptr;
    // cudaFree waits for the device: work still reading the old buffer ends first.
    if (ptr) LOOM_CUDA_CHECK(cudaFree(ptr));
    ptr = nullptr;
    have = 0;
    LOOM_CUDA_CHECK(cudaMalloc(&ptr, size_t(std::max<int64_t>(bytes, 1))));
    have = bytes;
    note_peak();
    return ptr;
}

template <typename T>
void CudaExecutor<T>::pack_grads(const std::vector<int>& rows, void* dst) {
    T* out = static_cast<T*>(dst);
    int64_t off = 0;
    for (int i : rows) {
        const ParamRow& r = table_.row(i);
        const size_t bytes = size_t(r.numel()) * sizeof(T);
        if (r.local)
            LOOM_CUDA_CHECK(cudaMemcpyAsync(out + off, grads_ + r.offset, bytes,
                                            cudaMemcpyDeviceToDevice, ctx_.stream()));
        else
            LOOM_CUDA_CHECK(cudaMemsetAsync(out + off, 0, bytes, ctx_.stream()));
        off += r.numel();
    }
}

template <typename T>
void CudaExecutor<T>::unpack_grads(const std::vector<int>& rows, const void* src) {
    const T* in = static_cast<const T*>(src);
    int64_t off = 0;
    for (int i : rows) {
        const ParamRow& r = table_.row(i);
        if (r.local)
            LOOM_CUDA_CHECK(cudaMemcpyAsync(grads_ + r.offset, in + off,
                                            size_t(r.numel()) * sizeof(T), cudaMemcpyDeviceToDevice,
                                            ctx_.stream()));
        off += r.numel();
    }
}

template <typename T>
void CudaExecutor<T>::attach_group(Communicator& group) {
#if defined(LOOM_HAVE_NCCL)
    auto* nccl = dynamic_cast<CommNccl*>(&group);
    LOOM_CHECK(nccl != nullptr && nccl->device() == options_.device,
               "CUDA executor: group '{}' must be an NCCL communicator on device {}", group.name(),
               options_.device);
    // Sends then read what the stream computed before them.
    nccl->set_compute_stream(ctx_.stream());
#else
    LOOM_FAIL("CUDA executor: group '{}' on GPUs needs a build with NCCL", group.name());
#endif
}

#define LOOM_INSTANTIATE(T)                                                            \
    template const void* CudaExecutor<T>::stage_output() const;                        \
    template const void* CudaExecutor<T>::stage_input_grad() const;                    \
    template std::unique_ptr<CudaModel> CudaExecutor<T>::make_instance(Model&);        \
    template void CudaExecutor<T>::check_owner(const char*) const;                     \
    template void* CudaExecutor<T>::message_buffer(int64_t, int64_t);                  \
    template void CudaExecutor<T>::pack_grads(const std::vector<int>&, void*);         \
    template void CudaExecutor<T>::unpack_grads(const std::vector<int>&, const void*); \
    template void CudaExecutor<T>::attach_group(Communicator&);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

}  // namespace loom
