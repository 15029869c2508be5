// The throwing side of cuda_check.h, compiled by the host compiler (fmt is fine here).
#include "backend/cuda/cuda_check.h"

#include "core/check.h"

namespace loom {

void cuda_fail(const char* file, int line, const char* call, cudaError_t err) {
    throw Error(fmt::format("CUDA error at {}:{}: {} failed: {} ({})", file, line, call,
                            cudaGetErrorString(err), cudaGetErrorName(err)));
}

void cublas_fail(const char* file, int line, const char* call, cublasStatus_t st) {
    throw Error(fmt::format("cuBLAS error at {}:{}: {} failed: {} ({})", file, line, call,
                            cublasGetStatusString(st), int(st)));
}

void cuda_require_fail(const char* file, int line, const std::string& msg) {
    throw Error(fmt::format("{} (at {}:{})", msg, file, line));
}

#if defined(LOOM_HAVE_NCCL)
void nccl_fail(const char* file, int line, const char* call, ncclResult_t res) {
    throw Error(fmt::format("NCCL error at {}:{}: {} failed: {}", file, line, call,
                            ncclGetErrorString(res)));
}
#endif

}  // namespace loom
