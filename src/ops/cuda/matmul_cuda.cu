// CUDA linear layer: y = x @ W^T + b (nn.Linear) or x @ W + b (Conv1D), three
// GEMMs and a column reduction.
//
// Same arguments as ops/matmul.h. dw and db accumulate (+=): dw through the
// GEMM's beta = 1, db through a deterministic column reduction. dx overwrites
// unless `accumulate_dx`. The bias add rides on cuBLASLt's epilogue when it
// can. The operands are the activations themselves, never a rounded copy.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/column_sum.cuh"
#include "ops/cuda/entries_cuda.h"
#include "ops/cuda/gemm_cuda.h"

namespace loom::cuda {
namespace {

// ld of the weight as stored, and whether the forward GEMM transposes it.
struct WeightView {
    int64_t ld;
    bool trans_fwd;
};
WeightView weight_view(WeightLayout layout, int64_t C, int64_t OC) {
    return layout == WeightLayout::out_in ? WeightView{C, true} : WeightView{OC, false};
}

}  // namespace

void matmul_forward(const OpCtx& c, DType operands, void* y, const void* x, const void* w,
                    const void* b, int64_t N, int64_t C, int64_t OC, WeightLayout layout,
                    const GemmRounded& r) {
    check_act_type(c, operands, "matmul_forward");
    LOOM_CUDA_REQUIRE(r.w16 == nullptr && r.keep_x16 == nullptr && r.x16 == nullptr,
                      "matmul_forward: rounded GEMM operands given on CUDA");
    if (N <= 0 || OC <= 0) return;
    CudaContext& ctx = context(c);
    const WeightView v = weight_view(layout, C, OC);
    const bool bias_added = with_act(c, "matmul_forward", [&](auto t) {
        using T = decltype(t);
        if (b && gemm_bias_epilogue_cuda<T>(false, v.trans_fwd, N, OC, C, P<T>(x), C, P<T>(w), v.ld,
                                            P<T>(y), OC, P<T>(b), ctx))
            return true;
        gemm_cuda<T>(false, v.trans_fwd, N, OC, C, 1.0f, P<T>(x), C, P<T>(w), v.ld, 0.0f, P<T>(y),
                     OC, ctx);
        return false;
    });
    // The fallback when the epilogue is unavailable.
    if (!bias_added) add_bias(c, y, b, N, OC);
}

void matmul_backward(const OpCtx& c, DType operands, void* dx, void* dw, void* db, const void* dy,
                     const void* x, const void* w, int64_t N, int64_t C, int64_t OC,
                     WeightLayout layout, bool accumulate_dx, const GemmRounded& r) {
    check_act_type(c, operands, "matmul_backward");
    LOOM_CUDA_REQUIRE(r.x16 == nullptr, "matmul_backward: rounded GEMM operands given on CUDA");
    if (N <= 0) return;
    CudaContext& ctx = context(c);
    const WeightView v = weight_view(layout, C, OC);
    with_act(c, "matmul_backward", [&](auto t) {
        using T = decltype(t);
        if (dx) {
            // dx (N, C) = dy (N, OC) @ W' where W' is (OC, C): W as stored for out_in.
            gemm_cuda<T>(false, !v.trans_fwd, N, C, OC, 1.0f, P<T>(dy), OC, P<T>(w), v.ld,
                         accumulate_dx ? 1.0f : 0.0f, P<T>(dx), C, ctx);
        }
        if (dw) {
            if (layout == WeightLayout::out_in) {
                // dW (OC, C) += dy^T (OC, N) @ x (N, C)
                gemm_cuda<T>(true, false, OC, C, N, 1.0f, P<T>(dy), OC, P<T>(x), C, 1.0f, P<T>(dw),
                             C, ctx);
            } else {
                // dW (C, OC) += x^T (C, N) @ dy (N, OC)
                gemm_cuda<T>(true, false, C, OC, N, 1.0f, P<T>(x), C, P<T>(dy), OC, 1.0f, P<T>(dw),
                             OC, ctx);
            }
        }
        if (db) gpu::column_sum_accumulate(P<T>(db), P<T>(dy), N, OC, ctx.stream());
    });
}

}  // namespace loom::cuda
