// GEMM: fp32 (both oneDNN routes) and bf16 (both routes where oneDNN has bf16
// kernels, the fp32-widened one everywhere) against the fp64 reference, and the
// fp64 reference itself against a naive triple loop, on odd sizes, every
// transpose combination, padded leading dimensions, bias, alpha and beta.
#include <omp.h>

#include <cstdint>
#include <random>
#include <vector>

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

// bf16 operands that are small integers: every product and partial sum is an
// integer below 2^24, exact in fp32 whatever the summation order, so a correct
// bf16 GEMM equals the fp64 reference bit for bit. alpha and beta are powers
// of two for the same reason.
struct IntOperands {
    int64_t lda, ldb, ldc;
    std::vector<uint16_t> A, B;
    std::vector<float> C0, bias;
};

IntOperands int_operands(const Case& c, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> d(-8, 8);
    auto ints = [&](int64_t n) {
        std::vector<float> v(static_cast<size_t>(n));
        for (float& x : v) x = float(d(rng));
        return v;
    };
    auto bf16 = [](const std::vector<float>& v) {
        std::vector<uint16_t> b(v.size());
        for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
        return b;
    };
    IntOperands o;
    const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
    const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
    o.lda = a_cols + 2;
    o.ldb = b_cols + 3;
    o.ldc = c.N + 1;
    o.A = bf16(ints(a_rows * o.lda));
    o.B = bf16(ints(b_rows * o.ldb));
    o.C0 = ints(c.M * o.ldc);
    o.bias = ints(c.N);
    return o;
}

// The fp64 reference of a case on IntOperands, as floats (exact).
std::vector<float> int_reference(const Case& c, const IntOperands& o) {
    auto widen = [](const std::vector<uint16_t>& b) {
        std::vector<double> v(b.size());
        for (size_t i = 0; i < b.size(); ++i) v[i] = bf16_to_f32(b[i]);
        return v;
    };
    const std::vector<double> A = widen(o.A), B = widen(o.B);
    std::vector<double> C(o.C0.begin(), o.C0.end()), bias(o.bias.begin(), o.bias.end());
    gemm<double>(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), o.lda, B.data(), o.ldb, c.beta,
                 C.data(), o.ldc, c.bias ? bias.data() : nullptr);
    return std::vector<float>(C.begin(), C.end());
}

// The widened route always; oneDNN's bf16 kernels where this CPU has them.
std::vector<Bf16Impl> bf16_routes() {
    std::vector<Bf16Impl> r{Bf16Impl::widen_f32};
    if (gemm_bf16_route() == Bf16Impl::dnnl_bf16) r.push_back(Bf16Impl::dnnl_bf16);
    return r;
}

const char* impl_name(Bf16Impl impl) {
    return impl == Bf16Impl::widen_f32 ? "widen_f32" : "dnnl_bf16";
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

// K = 0 is an empty product: C = beta * C (+ bias) on every route, A and B
// unread (oneDNN's sgemm and matmul both reject it).
// Scratch B operands start where oneDNN's AVX2 sgemm reads them at full speed
// (16 bytes past a 64-byte boundary, gemm.cpp), wherever malloc put the vector,
// with n floats from there, and keep their start when asked for less.
TEST(Gemm, OperandBufferStartsSixteenBytesPastSixtyFour) {
    for (int64_t n : {1, 5, 1000, 300000}) {
        // Vectors of varied sizes first, so the buffers land at varied addresses.
        std::vector<std::vector<float>> spacers;
        for (int k = 0; k < 4; ++k) {
            spacers.emplace_back(size_t(1 + 3 * k));
            std::vector<float> w;
            float* p = gemm_operand_buffer(w, n);
            EXPECT_EQ(int64_t(reinterpret_cast<uintptr_t>(p) % 64), k_gemm_operand_skew_bytes)
                << "n " << n;
            EXPECT_GE(w.data() + w.size(), p + n);
            p[n - 1] = 1.0f;  // within the vector (ASan checks it)
            EXPECT_EQ(gemm_operand_buffer(w, n / 2 + 1), p);
        }
    }
}

TEST(Gemm, EmptyKScalesCAndAddsTheBias) {
    const int64_t M = 5, N = 3, ldc = 4;
    const std::vector<float> bias = {1.0f, -2.0f, 0.5f};
    for (GemmImpl impl : {GemmImpl::dnnl_sgemm, GemmImpl::dnnl_matmul}) {
        for (float beta : {0.0f, 0.5f}) {
            std::vector<float> C(size_t(M * ldc), 4.0f);
            gemm_f32_with(impl, false, true, M, N, 0, 1.0f, nullptr, 1, nullptr, 1, beta,
                          C.data(), ldc, bias.data());
            for (int64_t i = 0; i < M; ++i) {
                for (int64_t j = 0; j < N; ++j)
                    EXPECT_EQ(C[size_t(i * ldc + j)], beta * 4.0f + bias[size_t(j)]);
                EXPECT_EQ(C[size_t(i * ldc + N)], 4.0f) << "the padding past N is left alone";
            }
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
    for (Bf16Impl impl : bf16_routes()) {
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
            gemm_bf16_with(impl, c.ta, c.tb, c.M, c.N, c.K, float(c.alpha), Ab.data(), o.lda,
                           Bb.data(), o.ldb, float(c.beta), C.data(), o.ldc,
                           c.bias ? bias.data() : nullptr);
            EXPECT_TRUE(all_close(label(c) + " " + impl_name(impl), C, want, tol::gemm_bf16));
        }
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

// The widened route cuts K into panels of at most 1024: K on both sides of
// one, two and three panels, every transpose, strided operands, alpha, beta
// and bias (added once). Exact on integer operands, so any slip in a panel's
// offset, stride or beta shows as a wrong bit; oneDNN's bf16 route too where
// it exists.
TEST(Gemm, Bf16RoutesAreExactOnIntegerOperandsAcrossKPanels) {
    uint64_t seed = 900;
    for (Bf16Impl impl : bf16_routes())
        for (int t = 0; t < 4; ++t) {
            const bool ta = t & 2, tb = t & 1;
            for (const Case& c : {Case{ta, tb, 5, 3, 1, 1.0, 0.0, false},
                                  Case{ta, tb, 37, 29, 1023, 0.5, 0.0, true},
                                  Case{ta, tb, 13, 70, 1024, 1.0, -2.0, false},
                                  Case{ta, tb, 21, 11, 1025, -2.0, 1.0, true},
                                  Case{ta, tb, 3, 17, 2049, 1.0, 0.5, true},
                                  Case{ta, tb, 66, 1, 3001, 0.25, 0.0, false}}) {
                const IntOperands o = int_operands(c, seed += 10);
                std::vector<float> C = o.C0;
                gemm_bf16_with(impl, c.ta, c.tb, c.M, c.N, c.K, float(c.alpha), o.A.data(), o.lda,
                               o.B.data(), o.ldb, float(c.beta), C.data(), o.ldc,
                               c.bias ? o.bias.data() : nullptr);
                EXPECT_EQ(C, int_reference(c, o)) << label(c) << " " << impl_name(impl);
            }
        }
}

TEST(Gemm, Bf16WidenedEdgeCases) {
    const Case c{false, true, 9, 7, 1100, 1.0, 0.0, true};
    const IntOperands o = int_operands(c, 77);
    const std::vector<float> want = int_reference(c, o);
    // beta = 0 never reads C, in the first panel or after.
    std::vector<float> C(o.C0.size(), std::nanf(""));
    gemm_bf16_with(Bf16Impl::widen_f32, c.ta, c.tb, c.M, c.N, c.K, 1.0f, o.A.data(), o.lda,
                   o.B.data(), o.ldb, 0.0f, C.data(), o.ldc, o.bias.data());
    for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j)
            ASSERT_EQ(C[size_t(i * o.ldc + j)], want[size_t(i * o.ldc + j)]) << i << ", " << j;

    // K = 0: C = beta * C + bias, the operands untouched (null here).
    C = o.C0;
    gemm_bf16_with(Bf16Impl::widen_f32, false, false, c.M, c.N, 0, 1.0f, nullptr, 1, nullptr, c.N,
                   2.0f, C.data(), o.ldc, o.bias.data());
    for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j)
            ASSERT_EQ(C[size_t(i * o.ldc + j)],
                      2.0f * o.C0[size_t(i * o.ldc + j)] + o.bias[size_t(j)]);

    // M = 0 or N = 0: nothing to write.
    C = o.C0;
    gemm_bf16_with(Bf16Impl::widen_f32, false, false, 0, c.N, c.K, 1.0f, nullptr, c.K, o.B.data(),
                   o.ldb, 0.0f, C.data(), o.ldc);
    gemm_bf16_with(Bf16Impl::widen_f32, false, false, c.M, 0, c.K, 1.0f, o.A.data(), o.lda, nullptr,
                   1, 0.0f, C.data(), o.ldc);
    EXPECT_EQ(C, o.C0);
}

// Attention calls gemm_bf16 from OpenMP threads: each thread widens into its
// own buffers, so concurrent calls of different shapes must not mix.
TEST(Gemm, Bf16WidenedInsideParallelRegion) {
    const Case cases[] = {{false, true, 40, 30, 1500, 1.0, 0.0, false},
                          {true, false, 17, 50, 700, 0.5, 1.0, true}};
    const IntOperands o[2] = {int_operands(cases[0], 11), int_operands(cases[1], 12)};
    // Each thread runs both shapes in turn, the other thread running the other.
    std::vector<float> got[8];
#pragma omp parallel for num_threads(2) schedule(static, 1)
    for (int r = 0; r < 8; ++r) {
        const int i = (r / 2) % 2;
        const Case& c = cases[i];
        got[r] = o[i].C0;
        gemm_bf16_with(Bf16Impl::widen_f32, c.ta, c.tb, c.M, c.N, c.K, float(c.alpha),
                       o[i].A.data(), o[i].lda, o[i].B.data(), o[i].ldb, float(c.beta),
                       got[r].data(), o[i].ldc, c.bias ? o[i].bias.data() : nullptr);
    }
    const std::vector<float> want[2] = {int_reference(cases[0], o[0]),
                                        int_reference(cases[1], o[1])};
    for (int r = 0; r < 8; ++r) EXPECT_EQ(got[r], want[(r / 2) % 2]) << "call " << r;
}
