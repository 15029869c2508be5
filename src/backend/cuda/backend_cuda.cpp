// BackendCuda: device discovery, device Storage, copies, streams and events (see backend_cuda.h).
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

BackendCuda::BackendCuda(int device) : device_(device) {
    int n = cuda_device_count();
    LOOM_CHECK(device >= 0 && device < n, "CUDA device {} requested but {} visible ({})", device, n,
               n == 0 ? cuda_unavailable_reason() : "check CUDA_VISIBLE_DEVICES");
}

std::string BackendCuda::name() const {
    return fmt::format("cuda:{} ({})", device_, cuda_device_info(device_).to_string());
}

std::shared_ptr<Storage> BackendCuda::alloc(size_t nbytes, bool zero) const {
    LOOM_CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    size_t rounded = nbytes == 0 ? 256 : (nbytes + 255) / 256 * 256;
    cudaError_t err = cudaMalloc(&p, rounded);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        LOOM_FAIL("out of GPU memory on cuda:{} allocating {} bytes: {}", device_, nbytes,
                  cudaGetErrorString(err));
    }
    if (zero) {
        // Ops run on non-blocking streams, which do not wait for the legacy
        // default stream: finish the memset before anyone can see the memory.
        LOOM_CUDA_CHECK(cudaMemset(p, 0, rounded));
        LOOM_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    }
    return Storage::wrap(
        p, nbytes, [p] { (void)cudaFree(p); }, Device::cuda);
}

Tensor BackendCuda::empty(DType dtype, Shape shape, std::string name) const {
    auto storage = alloc(size_t(shape.numel()) * dtype_size(dtype));
    return Tensor::view_of(std::move(storage), 0, dtype, shape, std::move(name));
}

static cudaMemcpyKind copy_kind(Device dst, Device src) {
    if (dst == Device::cuda)
        return src == Device::cuda ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
    return src == Device::cuda ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
}

void BackendCuda::copy(const Tensor& dst, const Tensor& src, cudaStream_t stream) const {
    LOOM_CHECK(dst.defined() && src.defined(), "copy: '{}' <- '{}': both tensors must be allocated",
               dst.name, src.name);
    LOOM_CHECK(dst.dtype == src.dtype && dst.numel() == src.numel(),
               "copy: '{}' ({} {}) <- '{}' ({} {}): dtype and element count must match", dst.name,
               dtype_name(dst.dtype), dst.shape.to_string(), src.name, dtype_name(src.dtype),
               src.shape.to_string());
    if (src.nbytes() == 0) return;
    LOOM_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(),
                                    copy_kind(dst.storage->device(), src.storage->device()),
                                    stream));
}

void BackendCuda::memset_zero(const Tensor& t, cudaStream_t stream) const {
    LOOM_CHECK(t.defined() && t.storage->device() == Device::cuda,
               "memset_zero: '{}' must be a CUDA tensor", t.name);
    LOOM_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream));
}

void BackendCuda::synchronize() const {
    LOOM_CUDA_CHECK(cudaSetDevice(device_));
    LOOM_CUDA_CHECK(cudaDeviceSynchronize());
}

Tensor BackendCuda::to_device(const Tensor& cpu, cudaStream_t stream) const {
    Tensor t = empty(cpu.dtype, cpu.shape, cpu.name);
    copy(t, cpu, stream);
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
    return t;
}

Tensor BackendCuda::to_host(const Tensor& gpu, cudaStream_t stream) const {
    Tensor t = Tensor::empty(gpu.dtype, gpu.shape, gpu.name);
    copy(t, gpu, stream);
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
    return t;
}

}  // namespace loom
