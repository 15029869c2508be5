// CublasHandle: creation and teardown (see cublas_handle.h).
#include "backend/cuda/cublas_handle.h"

#include "backend/cuda/cuda_check.h"

namespace loom {

CublasHandle::CublasHandle(cudaStream_t stream) {
    LOOM_CUBLAS_CHECK(cublasLtCreate(&lt_));
    LOOM_CUBLAS_CHECK(cublasCreate(&blas_));
    LOOM_CUBLAS_CHECK(cublasSetStream(blas_, stream));
    // Deterministic results: no atomics inside cuBLAS reductions.
    LOOM_CUBLAS_CHECK(cublasSetAtomicsMode(blas_, CUBLAS_ATOMICS_NOT_ALLOWED));
    LOOM_CUDA_CHECK(cudaMalloc(&workspace_, k_workspace_bytes));
}

CublasHandle::~CublasHandle() {
    // Destructors must not throw: errors at teardown are ignored on purpose.
    if (workspace_) (void)cudaFree(workspace_);
    if (blas_) (void)cublasDestroy(blas_);
    if (lt_) (void)cublasLtDestroy(lt_);
}

}  // namespace loom
