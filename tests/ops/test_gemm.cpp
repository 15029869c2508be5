// GEMM: fp32 (both oneDNN routes) and bf16 against the fp64 reference, and the
// fp64 reference itself against a naive triple loop, on odd sizes, every
// transpose combination, padded leading dimensions, bias, alpha and beta.
#include <omp.h>

#include "core/dtype.h"
#include "ops/gemm.h"
#include "ops_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

struct Case {
    bool ta, tb;
    int64_t M, N, K;
    double alpha, beta;
    bool bias;
};

// Naive C = alpha op(A) op(B) + beta C + bias in long double.
void naive(const Case& c, const double* A, int64_t lda, const double* B, int64_t ldb,
           const double* bias, double* C, int64_t ldc) {
    for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j) {
            long double s = 0;
            for (int64_t p = 0; p < c.K; ++p) {
                const double a = c.ta ? A[p * lda + i] : A[i * lda + p];
                const double b = c.tb ? B[j * ldb + p] : B[p * ldb + j];
                s += (long double)a * b;
            }
            double v = c.alpha * double(s);
            if (c.beta != 0) v += c.beta * C[i * ldc + j];
            if (bias) v += bias[j];
            C[i * ldc + j] = v;
        }
}

struct Operands {
    int64_t lda, ldb, ldc;
    std::vector<double> A, B, C0, bias;
};

// Leading dimensions padded by a few elements so strides are really used.
Operands make_operands(const Case& c, uint64_t seed) {
    Operands o;
    const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
    const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
    o.lda = a_cols + 3;
    o.ldb = b_cols + 5;
    o.ldc = c.N + 2;
    o.A = round_f32(randn(a_rows * o.lda, seed));
    o.B = round_f32(randn(b_rows * o.ldb, seed + 1));
    o.C0 = round_f32(randn(c.M * o.ldc, seed + 2));
    o.bias = round_f32(randn(c.N, seed + 3));
    return o;
}

std::vector<Case> odd_cases() {
    std::vector<Case> cases;
    for (int t = 0; t < 4; ++t) {
        const bool ta = t & 2, tb = t & 1;
        cases.push_back({ta, tb, 7, 5, 3, 1.0, 0.0, false});
        cases.push_back({ta, tb, 33, 17, 65, 1.0, 1.0, false});
        cases.push_back({ta, tb, 129, 67, 31, 0.125, 0.0, true});
        cases.push_back({ta, tb, 64, 100, 257, 1.0, 1.0, true});
        cases.push_back({ta, tb, 1, 9, 300, -0.5, 2.0, false});
    }
    return cases;
}

std::string label(const Case& c) {
    std::ostringstream os;
    os << (c.ta ? 'T' : 'N') << (c.tb ? 'T' : 'N') << " M=" << c.M << " N=" << c.N
       << " K=" << c.K << " alpha=" << c.alpha << " beta=" << c.beta << " bias=" << c.bias;
    return os.str();
}

}  // namespace

TEST(Gemm, F64MatchesNaiveLoop) {
    uint64_t seed = 10;
    for (const Case& c : odd_cases()) {
        Operands o = make_operands(c, seed += 10);
        std::vector<double> got = o.C0, want = o.C0;
        gemm<double>(c.ta, c.tb, c.M, c.N, c.K, c.alpha, o.A.data(), o.lda, o.B.data(), o.ldb,
                     c.beta, got.data(), o.ldc, c.bias ? o.bias.data() : nullptr);
        naive(c, o.A.data(), o.lda, o.B.data(), o.ldb, c.bias ? o.bias.data() : nullptr,
              want.data(), o.ldc);
        EXPECT_TRUE(all_close(label(c), got, want, Tol{1e-12, 1e-12}));
    }
}

TEST(Gemm, F32BothRoutesMatchF64) {
    uint64_t seed = 100;
    for (GemmImpl impl : {GemmImpl::dnnl_sgemm, GemmImpl::dnnl_matmul}) {
        for (const Case& c : odd_cases()) {
            Operands o = make_operands(c, seed += 10);
            std::vector<double> want = o.C0;
            gemm<double>(c.ta, c.tb, c.M, c.N, c.K, c.alpha, o.A.data(), o.lda, o.B.data(),
                         o.ldb, c.beta, want.data(), o.ldc, c.bias ? o.bias.data() : nullptr);
            std::vector<float> A = to_f32(o.A), B = to_f32(o.B), C = to_f32(o.C0),
                               bias = to_f32(o.bias);
            gemm_f32_with(impl, c.ta, c.tb, c.M, c.N, c.K, float(c.alpha), A.data(), o.lda,
                          B.data(), o.ldb, float(c.beta), C.data(), o.ldc,
                          c.bias ? bias.data() : nullptr);
            EXPECT_TRUE(all_close(label(c) + (impl == GemmImpl::dnnl_sgemm ? " sgemm" : " matmul"),
                                  C, want, tol::gemm_f32));
        }
    }
}

TEST(Gemm, BetaZeroIgnoresGarbageInC) {
    const int64_t M = 6, N = 4, K = 5;
    std::vector<float> A = to_f32(randn(M * K, 1)), B = to_f32(randn(K * N, 2));
    for (GemmImpl impl : {GemmImpl::dnnl_sgemm, GemmImpl::dnnl_matmul}) {
        std::vector<float> C(size_t(M * N), std::nanf(""));
        gemm_f32_with(impl, false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(),
                      N);
        for (float x : C) EXPECT_FALSE(std::isnan(x));
    }
    std::vector<double> Ad(A.begin(), A.end()), Bd(B.begin(), B.end());
    std::vector<double> Cd(size_t(M * N), std::nan(""));
    gemm<double>(false, false, M, N, K, 1.0, Ad.data(), K, Bd.data(), N, 0.0, Cd.data(), N);
    for (double x : Cd) EXPECT_FALSE(std::isnan(x));
}

TEST(Gemm, InsideParallelRegionGivesSameResult) {
    // gemm_batched and attention call gemm from OpenMP threads.
    const int64_t M = 70, N = 50, K = 90;
    std::vector<float> A = to_f32(randn(M * K, 3)), B = to_f32(randn(K * N, 4));
    std::vector<float> ref(size_t(M * N)), par(size_t(2 * M * N));
    gemm<float>(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, ref.data(), N);
#pragma omp parallel for num_threads(2)
    for (int r = 0; r < 2; ++r)
        gemm<float>(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f,
                    par.data() + r * M * N, N);
    EXPECT_TRUE(all_close("thread 0", par.data(), ref.data(), M * N, tol::gemm_f32));
    EXPECT_TRUE(all_close("thread 1", par.data() + M * N, ref.data(), M * N, tol::gemm_f32));
}

TEST(Gemm, BatchedMatchesLoopOfSingleGemms) {
    // The attention layouts: heads interleaved in rows (ld = NH*HS, item stride HS)
    // or (T, T) blocks one after the other.
    const int64_t NH = 5, T = 13, HS = 7, C = NH * HS, TT = T * T;
    struct Layout {
        const char* name;
        bool ta, tb;
        int64_t M, N, K, lda, sa, na, ldb, sb, nb, ldc, sc, nc;
    };
    const Layout layouts[] = {
        {"scores q k^T", false, true, T, T, HS, C, HS, T * C, C, HS, T * C, T, TT, NH * TT},
        {"P v", false, false, T, HS, T, T, TT, NH * TT, C, HS, T * C, C, HS, T * C},
        {"P^T dout", true, false, T, HS, T, T, TT, NH * TT, C, HS, T * C, C, HS, T * C},
        {"q^T P^T", true, true, HS, T, T, C, HS, T * C, T, TT, NH * TT, T, HS * T, NH * HS * T},
    };
    uint64_t seed = 40;
    for (const Layout& l : layouts) {
        std::vector<double> A = round_f32(randn(l.na, seed++)), B = round_f32(randn(l.nb, seed++));
        std::vector<double> want(size_t(l.nc), 0.0), gotd(size_t(l.nc), 0.0);
        for (int64_t h = 0; h < NH; ++h)
            gemm<double>(l.ta, l.tb, l.M, l.N, l.K, 0.5, A.data() + h * l.sa, l.lda,
                         B.data() + h * l.sb, l.ldb, 0.0, want.data() + h * l.sc, l.ldc);
        gemm_batched<double>(NH, l.ta, l.tb, l.M, l.N, l.K, 0.5, A.data(), l.lda, l.sa, B.data(),
                             l.ldb, l.sb, 0.0, gotd.data(), l.ldc, l.sc);
        EXPECT_TRUE(all_close(std::string(l.name) + " f64", gotd, want, Tol{1e-12, 1e-12}));
        std::vector<float> Af = to_f32(A), Bf = to_f32(B), got(size_t(l.nc), 0.0f);
        gemm_batched<float>(NH, l.ta, l.tb, l.M, l.N, l.K, 0.5f, Af.data(), l.lda, l.sa,
                            Bf.data(), l.ldb, l.sb, 0.0f, got.data(), l.ldc, l.sc);
        EXPECT_TRUE(all_close(std::string(l.name) + " f32", got, want, tol::gemm_f32));
    }
}

TEST(Gemm, Bf16MatchesF64OnRoundedOperands) {
    uint64_t seed = 500;
    for (const Case& c : odd_cases()) {
        Operands o = make_operands(c, seed += 10);
        std::vector<float> Af = to_f32(o.A), Bf = to_f32(o.B);
        std::vector<uint16_t> Ab(Af.size()), Bb(Bf.size());
        convert_f32_to_bf16(Ab.data(), Af.data(), int64_t(Af.size()));
        convert_f32_to_bf16(Bb.data(), Bf.data(), int64_t(Bf.size()));
        // The reference multiplies the bf16 values exactly in fp64.
        std::vector<double> Ar(Ab.size()), Br(Bb.size());
        for (size_t i = 0; i < Ab.size(); ++i) Ar[i] = bf16_to_f32(Ab[i]);
        for (size_t i = 0; i < Bb.size(); ++i) Br[i] = bf16_to_f32(Bb[i]);
        std::vector<double> want = o.C0;
        gemm<double>(c.ta, c.tb, c.M, c.N, c.K, c.alpha, Ar.data(), o.lda, Br.data(), o.ldb,
                     c.beta, want.data(), o.ldc, c.bias ? o.bias.data() : nullptr);
        std::vector<float> C = to_f32(o.C0), bias = to_f32(o.bias);
        gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, float(c.alpha), Ab.data(), o.lda, Bb.data(), o.ldb,
                  float(c.beta), C.data(), o.ldc, c.bias ? bias.data() : nullptr);
        EXPECT_TRUE(all_close(label(c) + " bf16", C, want, tol::gemm_bf16));
    }
}

TEST(Gemm, Bf16ConversionRoundsLikeCore) {
    std::vector<float> x = to_f32(randn(100000, 7, 100.0));
    x[0] = std::nanf("");
    x[1] = INFINITY;
    x[2] = 1.00390625f;  // a tie
    std::vector<uint16_t> b(x.size());
    convert_f32_to_bf16(b.data(), x.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(b[i], f32_to_bf16(x[i])) << "index " << i;
    std::vector<float> back(x.size());
    convert_bf16_to_f32(back.data(), b.data(), int64_t(b.size()));
    for (size_t i = 3; i < x.size(); ++i)
        ASSERT_LE(std::fabs(back[i] - x[i]), std::fabs(x[i]) * (1.0f / 256)) << "index " << i;
}
