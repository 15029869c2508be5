// CUDA device discovery, streams and events (see backend_cuda.h).
#include "backend/cuda/backend_cuda.h"

#include <fmt/format.h>

#include "backend/cuda/cuda_check.h"
#include "core/check.h"

namespace loom {

int cuda_device_count() {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky "no device" error
        return 0;
    }
    return n;
}

std::string cuda_unavailable_reason() {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return fmt::format("cudaGetDeviceCount failed: {} ({})", cudaGetErrorString(err),
                           cudaGetErrorName(err));
    }
    if (n == 0) return "cudaGetDeviceCount reports 0 CUDA devices";
    return {};
}

std::string CudaDeviceInfo::to_string() const {
    return fmt::format("{} (sm_{}{}, {} SMs, {:.1f} GiB)", name, cc_major, cc_minor, sm_count,
                       double(total_bytes) / double(size_t(1) << 30));
}

CudaDeviceInfo cuda_device_info(int device) {
    cudaDeviceProp p{};
    LOOM_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
    CudaDeviceInfo info;
    info.name = p.name;
    info.cc_major = p.major;
    info.cc_minor = p.minor;
    info.sm_count = p.multiProcessorCount;
    info.total_bytes = p.totalGlobalMem;
    return info;
}

CudaStream::CudaStream() {
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
}
CudaStream::~CudaStream() {
    if (s_) (void)cudaStreamDestroy(s_);
}
void CudaStream::synchronize() const {
    LOOM_CUDA_CHECK(cudaStreamSynchronize(s_));
}

CudaEvent::CudaEvent(bool timing) {
    LOOM_CUDA_CHECK(
        cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
CudaEvent::~CudaEvent() {
    if (e_) (void)cudaEventDestroy(e_);
}
void CudaEvent::record(cudaStream_t s) {
    LOOM_CUDA_CHECK(cudaEventRecord(e_, s));
}
void CudaEvent::wait_on(cudaStream_t s) const {
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(s, e_, 0));
}
void CudaEvent::synchronize() const {
    LOOM_CUDA_CHECK(cudaEventSynchronize(e_));
}
float CudaEvent::elapsed_ms_since(const CudaEvent& start) const {
    float ms = 0;
    LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, e_));
    return ms;
}

}  // namespace loom
