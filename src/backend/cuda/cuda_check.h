// Error checks for CUDA, cuBLAS(Lt) and NCCL calls.
//
// Every macro carries __FILE__/__LINE__ (llm.c's cudaCheck) and throws
// loom::Error with the library's own error string, so a failure names the call
// site and the reason. This header pulls in no fmt: it is included by .cu files,
// which nvcc's front end cannot compile against fmt's consteval format strings;
// the throwing functions live in cuda_check.cpp, compiled by the host compiler.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#if defined(LOOM_HAVE_NCCL)
#include <nccl.h>
#endif

namespace loom {

[[noreturn]] void cuda_fail(const char* file, int line, const char* call, cudaError_t err);
[[noreturn]] void cublas_fail(const char* file, int line, const char* call, cublasStatus_t st);
// Argument and state errors raised from CUDA host code (message built by the caller).
[[noreturn]] void cuda_require_fail(const char* file, int line, const std::string& msg);
#if defined(LOOM_HAVE_NCCL)
[[noreturn]] void nccl_fail(const char* file, int line, const char* call, ncclResult_t res);
#endif

}  // namespace loom

#define LOOM_CUDA_CHECK(call)                                                                  \
    do {                                                                                       \
        cudaError_t loom_err_ = (call);                                                        \
        if (loom_err_ != cudaSuccess) ::loom::cuda_fail(__FILE__, __LINE__, #call, loom_err_); \
    } while (0)

#define LOOM_CUBLAS_CHECK(call)                                       \
    do {                                                              \
        cublasStatus_t loom_st_ = (call);                             \
        if (loom_st_ != CUBLAS_STATUS_SUCCESS)                        \
            ::loom::cublas_fail(__FILE__, __LINE__, #call, loom_st_); \
    } while (0)

#if defined(LOOM_HAVE_NCCL)
#define LOOM_NCCL_CHECK(call)                                        \
    do {                                                             \
        ncclResult_t loom_res_ = (call);                             \
        if (loom_res_ != ncclSuccess && loom_res_ != ncclInProgress) \
            ::loom::nccl_fail(__FILE__, __LINE__, #call, loom_res_); \
    } while (0)
#endif

// Launch check: catches bad launch configurations right away (asynchronous
// kernel faults surface at the next synchronising call).
#define LOOM_CUDA_CHECK_LAUNCH() LOOM_CUDA_CHECK(cudaGetLastError())

// LOOM_CUDA_REQUIRE(n > 0, "layer_norm_forward_cuda: N must be positive, got " +
// std::to_string(n));
#define LOOM_CUDA_REQUIRE(cond, msg)                                       \
    do {                                                                   \
        if (!(cond)) ::loom::cuda_require_fail(__FILE__, __LINE__, (msg)); \
    } while (0)
