// cuBLASLt GEMM (see gemm_cuda.h).
//
// NOTE: cuBLASLt assumes 256-byte aligned operands unless told otherwise, and
// picks vectorised kernels accordingly. Views such as attention heads or odd
// leading dimensions are not that aligned, so each call states the real
// alignment of every operand (address, leading dimension and batch stride)
// through the preference's MIN_ALIGNMENT attributes.
#include "ops/cuda/gemm_cuda.h"

#include <cstdint>
#include <optional>
#include <string>

#include "backend/cuda/cublas_handle.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"

namespace loom {
namespace {

struct LtGemm {
    bool trans_a = false, trans_b = false;
    int64_t M = 0, N = 0, K = 0;
    const void* A = nullptr;
    int64_t lda = 0, stride_a = 0;
    const void* B = nullptr;
    int64_t ldb = 0, stride_b = 0;
    void* C = nullptr;
    int64_t ldc = 0, stride_c = 0;
    int64_t batch = 1;
    float alpha = 1.0f, beta = 0.0f;
    cudaDataType_t type = CUDA_R_32F;  // A and B
    size_t elem_bytes = 4;
    cudaDataType_t c_type = CUDA_R_32F;  // C (= D)
    size_t c_elem_bytes = 4;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;
};

// RAII for the three cuBLASLt descriptor kinds.
struct MatmulDesc {
    cublasLtMatmulDesc_t d = nullptr;
    ~MatmulDesc() {
        if (d) (void)cublasLtMatmulDescDestroy(d);
    }
};
struct Layout {
    cublasLtMatrixLayout_t d = nullptr;
    ~Layout() {
        if (d) (void)cublasLtMatrixLayoutDestroy(d);
    }
};
struct Preference {
    cublasLtMatmulPreference_t d = nullptr;
    ~Preference() {
        if (d) (void)cublasLtMatmulPreferenceDestroy(d);
    }
};

// Largest power of two (<= 256) dividing the address and every stride in bytes.
uint32_t alignment_of(const void* p, int64_t ld_bytes, int64_t stride_bytes) {
    uint64_t bits = uint64_t(reinterpret_cast<uintptr_t>(p)) | uint64_t(ld_bytes) |
                    uint64_t(stride_bytes) | 256u;
    return uint32_t(bits & (~bits + 1));  // lowest set bit
}

void make_layout(Layout& l, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                 int64_t batch, int64_t stride) {
    LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l.d, type, uint64_t(rows), uint64_t(cols), ld));
    if (batch > 1) {
        int32_t count = int32_t(batch);
        LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l.d, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                           &count, sizeof count));
        LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
            l.d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
}

// Runs the GEMM; returns false (nothing launched) when no algorithm supports it.
bool lt_matmul(const LtGemm& g, CudaContext& ctx) {
    CublasHandle& h = ctx.blas();
    const bool tf32 = h.allow_tf32 && g.type == CUDA_R_32F;
    MatmulDesc op;
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescCreate(
        &op.d, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // Column-major view: C^T (N, M) = op(B)^T (N, K) @ op(A)^T (K, M).
    cublasOperation_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    LOOM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    LOOM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    if (g.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                         &g.epilogue, sizeof g.epilogue));
        LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                         &g.bias, sizeof g.bias));
    }
    // cuBLASLt's A is our B and vice versa (see above).
    Layout la, lb, lc;
    make_layout(la, g.type, g.trans_b ? g.K : g.N, g.trans_b ? g.N : g.K, g.ldb, g.batch,
                g.stride_b);
    make_layout(lb, g.type, g.trans_a ? g.M : g.K, g.trans_a ? g.K : g.M, g.lda, g.batch,
                g.stride_a);
    make_layout(lc, g.c_type, g.N, g.M, g.ldc, g.batch, g.stride_c);

    Preference pref;
    LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.d));
    size_t ws = h.workspace_bytes();
    LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    const int64_t eb = int64_t(g.elem_bytes);
    uint32_t align_a = alignment_of(g.B, g.ldb * eb, g.stride_b * eb);
    uint32_t align_b = alignment_of(g.A, g.lda * eb, g.stride_a * eb);
    const int64_t ceb = int64_t(g.c_elem_bytes);
    uint32_t align_c = alignment_of(g.C, g.ldc * ceb, g.stride_c * ceb);
    LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a));
    LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b));
    LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c));
    LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof align_c));

    const CublasHandle::AlgoKey key{g.M,
                                    g.N,
                                    g.K,
                                    g.trans_a,
                                    g.trans_b,
                                    g.lda,
                                    g.ldb,
                                    g.ldc,
                                    g.stride_a,
                                    g.stride_b,
                                    g.stride_c,
                                    g.batch,
                                    int64_t(g.type) | (int64_t(g.c_type) << 16),
                                    int64_t(g.epilogue),
                                    align_a,
                                    align_b,
                                    align_c,
                                    tf32,
                                    0,
                                    int64_t(g.beta != 0.0f)};
    std::optional<cublasLtMatmulAlgo_t> algo;
    if (const auto* cached = h.find_algo(key)) {
        algo = *cached;
    } else {
        cublasLtMatmulHeuristicResult_t result{};
        int found = 0;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h.lt(), op.d, la.d, lb.d, lc.d, lc.d,
                                                           pref.d, 1, &result, &found);
        if (st != CUBLAS_STATUS_NOT_SUPPORTED) LOOM_CUBLAS_CHECK(st);
        if (st == CUBLAS_STATUS_SUCCESS && found > 0) algo = result.algo;
        h.remember_algo(key, algo);
    }
    if (!algo) return false;
    LOOM_CUBLAS_CHECK(cublasLtMatmul(h.lt(), op.d, &g.alpha, g.B, la.d, g.A, lb.d, &g.beta, g.C,
                                     lc.d, g.C, lc.d, &*algo, h.workspace(), ws, ctx.stream()));
    return true;
}

void check_dims(const char* who, int64_t M, int64_t N, int64_t K) {
    LOOM_CUDA_REQUIRE(M >= 0 && N >= 0 && K >= 0,
                      std::string(who) + ": negative size M=" + std::to_string(M) +
                          " N=" + std::to_string(N) + " K=" + std::to_string(K));
}

template <typename T>
LtGemm make_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const T* A,
                 int64_t lda, const T* B, int64_t ldb, float beta, void* C, int64_t ldc) {
    LtGemm g;
    g.trans_a = ta;
    g.trans_b = tb;
    g.M = M;
    g.N = N;
    g.K = K;
    g.alpha = alpha;
    g.beta = beta;
    g.A = A;
    g.lda = lda;
    g.B = B;
    g.ldb = ldb;
    g.C = C;
    g.ldc = ldc;
    g.type = gpu::TypeInfo<T>::data_type;
    g.elem_bytes = sizeof(T);
    g.c_type = g.type;
    g.c_elem_bytes = sizeof(T);
    return g;
}

// grid (M, batch): row m of C in batch b = beta * itself (0 when beta is 0, even over NaN).
template <typename T>
__global__ void scale_matrix_kernel(T* C, int64_t N, int64_t ldc, int64_t stride_c, float beta) {
    T* row = C + int64_t(blockIdx.y) * stride_c + int64_t(blockIdx.x) * ldc;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x)
        row[j] = gpu::from_f32<T>(beta == 0.0f ? 0.0f : beta * gpu::to_f32(row[j]));
}

bool aligned16(const void* p) {
    return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

std::string describe(const LtGemm& g) {
    return "M=" + std::to_string(g.M) + " N=" + std::to_string(g.N) + " K=" + std::to_string(g.K) +
           " trans_a=" + std::to_string(g.trans_a) + " trans_b=" + std::to_string(g.trans_b) +
           " lda=" + std::to_string(g.lda) + " ldb=" + std::to_string(g.ldb) +
           " ldc=" + std::to_string(g.ldc) + " batch=" + std::to_string(g.batch);
}

}  // namespace

namespace {

// The batched GEMM for A, B in T and C in TC (T or float).
template <typename T, typename TC>
void gemm_batched_impl(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                       float alpha, const T* A, int64_t lda, int64_t stride_a, const T* B,
                       int64_t ldb, int64_t stride_b, float beta, TC* C, int64_t ldc,
                       int64_t stride_c, CudaContext& ctx) {
    check_dims("gemm_cuda", M, N, K);
    if (batch <= 0 || M == 0 || N == 0) return;
    if (K == 0) {
        // cuBLASLt rejects K = 0; the product is empty, so C = beta * C.
        scale_matrix_kernel<<<dim3(unsigned(M), unsigned(batch)), 256, 0, ctx.stream()>>>(
            C, N, ldc, stride_c, beta);
        LOOM_CUDA_CHECK_LAUNCH();
        return;
    }
    LtGemm g = make_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    g.c_type = gpu::TypeInfo<TC>::data_type;
    g.c_elem_bytes = sizeof(TC);
    g.batch = batch;
    g.stride_a = stride_a;
    g.stride_b = stride_b;
    g.stride_c = stride_c;
    LOOM_CUDA_REQUIRE(lt_matmul(g, ctx), "gemm_cuda: cuBLASLt has no algorithm for " + describe(g) +
                                             " (" + gpu::TypeInfo<T>::name + " x " +
                                             gpu::TypeInfo<T>::name + " -> " +
                                             gpu::TypeInfo<TC>::name + ")");
}

}  // namespace

template <typename T>
void gemm_batched_cuda(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                       float alpha, const T* A, int64_t lda, int64_t stride_a, const T* B,
                       int64_t ldb, int64_t stride_b, float beta, T* C, int64_t ldc,
                       int64_t stride_c, CudaContext& ctx) {
    gemm_batched_impl<T, T>(batch, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb,
                            stride_b, beta, C, ldc, stride_c, ctx);
}

template <typename T>
void gemm_batched_f32out_cuda(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N,
                              int64_t K, float alpha, const T* A, int64_t lda, int64_t stride_a,
                              const T* B, int64_t ldb, int64_t stride_b, float beta, float* C,
                              int64_t ldc, int64_t stride_c, CudaContext& ctx) {
    gemm_batched_impl<T, float>(batch, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb,
                                stride_b, beta, C, ldc, stride_c, ctx);
}

template <typename T>
void gemm_cuda(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const T* A,
               int64_t lda, const T* B, int64_t ldb, float beta, T* C, int64_t ldc,
               CudaContext& ctx) {
    gemm_batched_cuda<T>(1, trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0,
                         ctx);
}

template <typename T>
bool gemm_bias_epilogue_cuda(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                             const T* A, int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc,
                             const T* bias, CudaContext& ctx) {
    check_dims("gemm_bias_epilogue_cuda", M, N, K);
    // NOTE: the epilogue reads bias with vector loads; views
    // into a flat parameter buffer need not be 16-byte aligned, so those fall back.
    if (M == 0 || N == 0 || K == 0 || bias == nullptr || !aligned16(bias)) return false;
    LtGemm g = make_gemm(trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
    g.bias = bias;
    g.epilogue = CUBLASLT_EPILOGUE_BIAS;
    return lt_matmul(g, ctx);
}

#define LOOM_INSTANTIATE(T)                                                                     \
    template void gemm_cuda<T>(bool, bool, int64_t, int64_t, int64_t, float, const T*, int64_t, \
                               const T*, int64_t, float, T*, int64_t, CudaContext&);            \
    template void gemm_batched_cuda<T>(int64_t, bool, bool, int64_t, int64_t, int64_t, float,   \
                                       const T*, int64_t, int64_t, const T*, int64_t, int64_t,  \
                                       float, T*, int64_t, int64_t, CudaContext&);              \
    template bool gemm_bias_epilogue_cuda<T>(bool, bool, int64_t, int64_t, int64_t, const T*,   \
                                             int64_t, const T*, int64_t, T*, int64_t, const T*, \
                                             CudaContext&);                                     \
    template void gemm_batched_f32out_cuda<T>(                                                  \
        int64_t, bool, bool, int64_t, int64_t, int64_t, float, const T*, int64_t, int64_t,      \
        const T*, int64_t, int64_t, float, float*, int64_t, int64_t, CudaContext&);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

}  // namespace loom
