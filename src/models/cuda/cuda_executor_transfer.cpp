// CudaExecutor's host <-> device transfers (parameters, gradients) and its
// memory figures; the class is instantiated in cuda_executor.cpp, these
// members here.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <type_traits>

#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda_check.h"
#include "models/cuda/cuda_executor.h"
#include "ops/cuda/elementwise_cuda.h"

namespace loom {

template <typename T>
void CudaExecutor<T>::zero_grad() {
    LOOM_CUDA_CHECK(cudaMemsetAsync(grads_, 0, size_t(flat_) * sizeof(T), ctx_.stream()));
}

template <typename T>
void CudaExecutor<T>::upload_params() {
    LOOM_CUDA_CHECK(cudaMemcpyAsync(master_, table_.params_data(), size_t(flat_) * sizeof(float),
                                    cudaMemcpyHostToDevice, ctx_.stream()));
    if constexpr (!std::is_same_v<T, float>) convert_cuda<T, float>(params_, master_, flat_, ctx_);
    ctx_.synchronize();
}

template <typename T>
void CudaExecutor<T>::download_params() {
    LOOM_CUDA_CHECK(cudaMemcpyAsync(table_.params_data(), master_, size_t(flat_) * sizeof(float),
                                    cudaMemcpyDeviceToHost, ctx_.stream()));
    ctx_.synchronize();
}

template <typename T>
void CudaExecutor<T>::download_grads() {
    if constexpr (std::is_same_v<T, float>) {
        LOOM_CUDA_CHECK(cudaMemcpyAsync(table_.grads_data(), grads_, size_t(flat_) * sizeof(float),
                                        cudaMemcpyDeviceToHost, ctx_.stream()));
    } else {
        // Widened on the device through the AdamW moment-sized scratch.
        float* wide = static_cast<float*>(ctx_.scratch(size_t(flat_) * sizeof(float)));
        convert_cuda<float, T>(wide, grads_, flat_, ctx_);
        LOOM_CUDA_CHECK(cudaMemcpyAsync(table_.grads_data(), wide, size_t(flat_) * sizeof(float),
                                        cudaMemcpyDeviceToHost, ctx_.stream()));
    }
    ctx_.synchronize();
}

template <typename T>
int64_t CudaExecutor<T>::allocated_bytes() const {
    const int64_t per = int64_t(sizeof(T));
    int64_t b = int64_t(acts_arena_.bytes() + ints_arena_.bytes());
    for (const auto& [key, buf] : messages_) b += buf.second;
    if (owner_) return b;                   // the parameters are the owner's
    b += flat_ * (4 + per) + (optim_ ? optim_->state_bytes() : 0);  // master, grads, m and v
    if constexpr (!std::is_same_v<T, float>) b += flat_ * per;
    return b;
}

template <typename T>
void CudaExecutor<T>::note_peak() {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        peak_used_ = std::max(peak_used_, int64_t(total_b - free_b));
}

template <typename T>
int64_t CudaExecutor<T>::peak_device_bytes() {
    note_peak();
    return peak_used_;
}

template <typename T>
std::string CudaExecutor<T>::device_name() const {
    return fmt::format("cuda:{} ({})", options_.device,
                       cuda_device_info(options_.device).to_string());
}

#define LOOM_INSTANTIATE(T)                                         \
    template void CudaExecutor<T>::zero_grad();                     \
    template void CudaExecutor<T>::upload_params();                 \
    template void CudaExecutor<T>::download_params();               \
    template void CudaExecutor<T>::download_grads();                \
    template int64_t CudaExecutor<T>::allocated_bytes() const;      \
    template void CudaExecutor<T>::note_peak();                     \
    template int64_t CudaExecutor<T>::peak_device_bytes();          \
    template std::string CudaExecutor<T>::device_name() const;
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

}  // namespace loom
