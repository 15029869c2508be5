// CudaContext: stream, handles, scratch and the device error record (see cuda_context.h).
#include "backend/cuda/cuda_context.h"

#include <algorithm>

#include "backend/cuda/cublas_handle.h"
#include "backend/cuda/cuda_check.h"
#include "core/check.h"

namespace loom {

CudaContext::CudaContext(int device, cudaStream_t stream) : device_(device) {
    LOOM_CUDA_CHECK(cudaSetDevice(device));
    LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
    if (stream == nullptr) {
        LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        owns_stream_ = true;
    } else {
        stream_ = stream;
    }
    blas_ = std::make_unique<CublasHandle>(stream_);
    LOOM_CUDA_CHECK(cudaMalloc(&errors_, sizeof(DeviceErrorRecord)));
    LOOM_CUDA_CHECK(cudaMemsetAsync(errors_, 0, sizeof(DeviceErrorRecord), stream_));
}

CudaContext::~CudaContext() {
    // Teardown errors are ignored: a destructor must not throw.
    if (stream_) (void)cudaStreamSynchronize(stream_);
    blas_.reset();
    if (scratch_) (void)cudaFree(scratch_);
    if (errors_) (void)cudaFree(errors_);
    if (owns_stream_) (void)cudaStreamDestroy(stream_);
}

void* CudaContext::scratch(size_t nbytes) {
    if (nbytes <= scratch_bytes_) return scratch_;
    // Grow by at least 1.5x so a slowly growing request does not reallocate each step.
    size_t want = std::max(nbytes, scratch_bytes_ + scratch_bytes_ / 2);
    want = (want + (size_t(1) << 20) - 1) / (size_t(1) << 20) * (size_t(1) << 20);
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (scratch_) LOOM_CUDA_CHECK(cudaFree(scratch_));
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    cudaError_t err = cudaMalloc(&scratch_, want);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        LOOM_FAIL("CUDA scratch: cannot allocate {} bytes on device {}: {}", want, device_,
                  cudaGetErrorString(err));
    }
    scratch_bytes_ = want;
    return scratch_;
}

void CudaContext::synchronize() {
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaContext::check_device_errors() {
    DeviceErrorRecord rec{};
    LOOM_CUDA_CHECK(cudaMemcpyAsync(&rec, errors_, sizeof rec, cudaMemcpyDeviceToHost, stream_));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (rec.code == k_device_ok) return;
    LOOM_CUDA_CHECK(cudaMemsetAsync(errors_, 0, sizeof(DeviceErrorRecord), stream_));
    switch (rec.code) {
        case k_device_embedding_id_out_of_range:
            LOOM_FAIL("embedding (CUDA): id {} at row {} is outside [0, {})", rec.b, rec.a, rec.c);
        case k_device_xent_target_out_of_range:
            LOOM_FAIL(
                "softmax_xent (CUDA): target {} at row {} is outside [0, {}) and is not "
                "the ignore index -100",
                rec.b, rec.a, rec.c);
        default:
            LOOM_FAIL("CUDA kernel reported unknown error code {} ({}, {}, {})", rec.code, rec.a,
                      rec.b, rec.c);
    }
}

}  // namespace loom
