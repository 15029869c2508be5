// cuBLASLt GEMM and the CUDA table's linear layer entries (both weight
// layouts, with the bias epilogue and without a bias) against the CPU
// implementation.
#include "cuda_test_util.h"
#include "ops/cuda/gemm_cuda.h"
#include "ops/gemm.h"
#include "ops/matmul.h"

namespace loom::test {
namespace {

template <typename T>
class CudaMatmul : public CudaTypedOpTest<T> {};
TYPED_TEST_SUITE(CudaMatmul, DeviceTypes, TypeNames);

// GEMM outputs are sums of K products: tolerances scale with sqrt(K).
template <typename T>
Tol gemm_tol(int64_t K) {
    const double s = std::sqrt(double(K > 0 ? K : 1));
    if constexpr (std::is_same_v<T, float>) return {2e-6 * s, 1e-4};
    return {tol_for<T>().abs * 0.25 * s, tol_for<T>().rel};
}

TYPED_TEST(CudaMatmul, GemmAllTransposesAndStrides) {
    using T = TypeParam;
    struct Case {
        int64_t M, N, K;
    };
    for (Case c :
         {Case{1, 1, 1}, Case{5, 3, 7}, Case{64, 96, 128}, Case{33, 17, 0}, Case{129, 65, 31}}) {
        for (int ta = 0; ta < 2; ++ta) {
            for (int tb = 0; tb < 2; ++tb) {
                // Padded leading dimensions (+3) exercise strides and misalignment.
                const int64_t lda = (ta ? c.M : c.K) + 3, ldb = (tb ? c.K : c.N) + 3, ldc = c.N + 3;
                const int64_t rows_a = ta ? c.K : c.M, rows_b = tb ? c.N : c.K;
                auto A = round_all<T>(random_vec(size_t(rows_a * lda), 1));
                auto B = round_all<T>(random_vec(size_t(rows_b * ldb), 2));
                auto C = round_all<T>(random_vec(size_t(c.M * ldc), 3));
                std::vector<float> want = C;
                gemm<float>(ta, tb, c.M, c.N, c.K, 0.75f, A.data(), lda, B.data(), ldb, 0.5f,
                            want.data(), ldc);
                auto dA = upload<T>(A), dB = upload<T>(B), dC = upload<T>(C);
                gemm_cuda<T>(ta, tb, c.M, c.N, c.K, 0.75f, dA->get(), lda, dB->get(), ldb, 0.5f,
                             dC->get(), ldc, this->ctx());
                const std::string tag = "M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) +
                                        " K=" + std::to_string(c.K) + " ta=" + std::to_string(ta) +
                                        " tb=" + std::to_string(tb);
                EXPECT_TRUE(all_close(tag, download(*dC), want, gemm_tol<T>(c.K)));
            }
        }
    }
}

TYPED_TEST(CudaMatmul, GemmBatchedMatchesLoop) {
    using T = TypeParam;
    const int64_t batch = 6, M = 17, N = 24, K = 40;
    const int64_t sa = M * K + 5, sb = K * N + 7, sc = M * N + 1;  // odd batch strides
    auto A = round_all<T>(random_vec(size_t(batch * sa), 1));
    auto B = round_all<T>(random_vec(size_t(batch * sb), 2));
    std::vector<float> want(size_t(batch * sc), 0.0f);
    gemm_batched<float>(batch, false, true, M, N, K, 1.0f, A.data(), K, sa, B.data(), K, sb, 0.0f,
                        want.data(), N, sc);
    auto dA = upload<T>(A), dB = upload<T>(B);
    auto dC = upload<T>(std::vector<float>(want.size(), 0.0f));
    gemm_batched_cuda<T>(batch, false, true, M, N, K, 1.0f, dA->get(), K, sa, dB->get(), K, sb,
                         0.0f, dC->get(), N, sc, this->ctx());
    EXPECT_TRUE(all_close("batched", download(*dC), want, gemm_tol<T>(K)));
    // fp32 output from T operands: only the CPU/GPU summation order differs.
    DeviceBuffer<float> dC32(want.size());
    gemm_batched_f32out_cuda<T>(batch, false, true, M, N, K, 1.0f, dA->get(), K, sa, dB->get(), K,
                                sb, 0.0f, dC32.get(), N, sc, this->ctx());
    EXPECT_TRUE(all_close("batched f32 out", download(dC32), want, gemm_tol<float>(K)));
}

TYPED_TEST(CudaMatmul, LinearForwardBackwardBothLayouts) {
    using T = TypeParam;
    struct Case {
        int64_t N, C, OC;
    };
    for (Case c :
         {Case{1, 1, 1}, Case{7, 5, 3}, Case{64, 128, 96}, Case{33, 768, 2}, Case{100, 64, 257}}) {
        for (WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
            const std::string tag = "N=" + std::to_string(c.N) + " C=" + std::to_string(c.C) +
                                    " OC=" + std::to_string(c.OC) +
                                    (layout == WeightLayout::out_in ? " out_in" : " in_out");
            auto x = round_all<T>(random_vec(size_t(c.N * c.C), 1));
            auto w = round_all<T>(random_vec(size_t(c.C * c.OC), 2));
            auto b = round_all<T>(random_vec(size_t(c.OC), 3));
            auto dy = round_all<T>(random_vec(size_t(c.N * c.OC), 4));
            auto dx0 = round_all<T>(random_vec(size_t(c.N * c.C), 5));
            auto dw0 = round_all<T>(random_vec(size_t(c.C * c.OC), 6));
            auto db0 = round_all<T>(random_vec(size_t(c.OC), 7));

            std::vector<float> y(size_t(c.N * c.OC));
            matmul_forward<float>(y.data(), x.data(), w.data(), b.data(), c.N, c.C, c.OC, layout);
            std::vector<float> dx = dx0, dw = dw0, db = db0;
            matmul_backward<float>(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                                   c.N, c.C, c.OC, layout, true);

            auto gx = upload<T>(x), gw = upload<T>(w), gb = upload<T>(b), gdy = upload<T>(dy);
            DeviceBuffer<T> out(size_t(c.N * c.OC));
            const OpCtx g = this->template gpu<T>();
            g.nn().matmul_forward(g, g.act, out.get(), gx->get(), gw->get(), gb->get(), c.N, c.C,
                                  c.OC, layout, {});
            EXPECT_TRUE(all_close(tag + " out", download(out), y, gemm_tol<T>(c.C)));
            auto gdx = upload<T>(dx0), gdw = upload<T>(dw0), gdb = upload<T>(db0);
            g.nn().matmul_backward(g, g.act, gdx->get(), gdw->get(), gdb->get(), gdy->get(),
                                   gx->get(), gw->get(), c.N, c.C, c.OC, layout, true, {});
            EXPECT_TRUE(all_close(tag + " dinp (+=)", download(*gdx), dx, gemm_tol<T>(c.OC)));
            EXPECT_TRUE(all_close(tag + " dweight", download(*gdw), dw, gemm_tol<T>(c.N)));
            EXPECT_TRUE(all_close(tag + " dbias", download(*gdb), db, gemm_tol<T>(c.N)));
            // Bias-free forward (no epilogue).
            std::vector<float> y_nb(size_t(c.N * c.OC));
            matmul_forward<float>(y_nb.data(), x.data(), w.data(), nullptr, c.N, c.C, c.OC, layout);
            g.nn().matmul_forward(g, g.act, out.get(), gx->get(), gw->get(), nullptr, c.N, c.C,
                                  c.OC, layout, {});
            EXPECT_TRUE(all_close(tag + " out (no bias)", download(out), y_nb, gemm_tol<T>(c.C)));
        }
    }
}

}  // namespace
}  // namespace loom::test
