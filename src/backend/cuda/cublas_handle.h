// CublasHandle: the cuBLAS and cuBLASLt handles of one device plus the GEMM workspace.
//
// Owned by a CudaContext (no global handle: principle 5). cuBLASLt gets a fixed
// 32 MiB workspace (what Hopper's fastest kernels ask for); cuBLAS proper is kept
// for the few calls cuBLASLt lacks. TF32 is off by default so fp32 GEMMs match
// the CPU reference to fp32 rounding; `allow_tf32` opts in for speed.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>

namespace loom {

class CublasHandle {
  public:
    static constexpr size_t k_workspace_bytes = size_t(32) << 20;

    explicit CublasHandle(cudaStream_t stream);
    ~CublasHandle();
    CublasHandle(const CublasHandle&) = delete;
    CublasHandle& operator=(const CublasHandle&) = delete;

    cublasLtHandle_t lt() const { return lt_; }
    cublasHandle_t blas() const { return blas_; }
    void* workspace() const { return workspace_; }
    size_t workspace_bytes() const { return k_workspace_bytes; }

    bool allow_tf32 = false;

    // cuBLASLt's heuristic costs tens of microseconds per call; a training step
    // repeats the same few dozen GEMM shapes, so the chosen algorithm is kept per
    // shape (every field that reaches the heuristic: sizes, transposes, leading
    // dimensions, strides, batch, types, epilogue, alignments, TF32).
    // A cached nullopt means "cuBLASLt has no algorithm for this" (the caller falls back).
    using AlgoKey = std::array<int64_t, 20>;
    const std::optional<cublasLtMatmulAlgo_t>* find_algo(const AlgoKey& key) const {
        auto it = algos_.find(key);
        return it == algos_.end() ? nullptr : &it->second;
    }
    void remember_algo(const AlgoKey& key, const std::optional<cublasLtMatmulAlgo_t>& algo) {
        algos_[key] = algo;
    }

  private:
    std::map<AlgoKey, std::optional<cublasLtMatmulAlgo_t>> algos_;
    cublasLtHandle_t lt_ = nullptr;
    cublasHandle_t blas_ = nullptr;
    void* workspace_ = nullptr;
};

}  // namespace loom
