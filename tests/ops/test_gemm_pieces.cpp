// The pieces a large GEMM is shared in (ops/gemm_pieces.h): they tile C
// exactly once, large ones first, only where they pay; and a GEMM run in
// pieces is exact to tolerance and the same bit for bit whichever thread
// takes which piece.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "ops/gemm.h"
#include "ops/gemm_pieces.h"
#include "ops_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

// How many pieces cover each element of C (M, N).
std::vector<int> coverage(const std::vector<GemmPiece>& pieces, int64_t M, int64_t N) {
    std::vector<int> n(size_t(M * N), 0);
    for (const GemmPiece& p : pieces) {
        EXPECT_GT(p.rows, 0);
        EXPECT_GT(p.cols, 0);
        for (int64_t i = p.row; i < p.row + p.rows; ++i)
            for (int64_t j = p.col; j < p.col + p.cols; ++j) ++n[size_t(i * N + j)];
    }
    return n;
}

// Restores the team size a test changed.
struct Threads {
    explicit Threads(int n) : saved(omp_get_max_threads()) { omp_set_num_threads(n); }
    ~Threads() { omp_set_num_threads(saved); }
    int saved;
};

}  // namespace

TEST(GemmPieces, TileTheOutputOnceWithTheLargePiecesFirst) {
    struct Shape {
        int64_t M, N, K;
    };
    for (const Shape s : {Shape{1024, 3072, 768}, Shape{3072, 768, 1024}, Shape{1000, 700, 900},
                          Shape{4096, 4096, 4096}}) {
        for (int threads : {2, 3, 4, 8}) {
            const std::vector<GemmPiece> pieces = gemm_pieces(s.M, s.N, s.K, threads);
            ASSERT_EQ(pieces.size(), size_t(2 * threads)) << s.M << "x" << s.N << " " << threads;
            const std::vector<int> n = coverage(pieces, s.M, s.N);
            EXPECT_TRUE(std::all_of(n.begin(), n.end(), [](int c) { return c == 1; }))
                << s.M << "x" << s.N << " at " << threads << " threads";
            // Each of the first `threads` pieces is larger than each later one.
            int64_t smallest_first = s.M * s.N, largest_last = 0;
            for (size_t i = 0; i < pieces.size(); ++i) {
                const int64_t area = pieces[i].rows * pieces[i].cols;
                if (i < size_t(threads))
                    smallest_first = std::min(smallest_first, area);
                else
                    largest_last = std::max(largest_last, area);
            }
            EXPECT_GT(smallest_first, largest_last);
            // The same shape always gives the same pieces.
            const std::vector<GemmPiece> again = gemm_pieces(s.M, s.N, s.K, threads);
            for (size_t i = 0; i < pieces.size(); ++i)
                EXPECT_TRUE(pieces[i].row == again[i].row && pieces[i].col == again[i].col &&
                            pieces[i].rows == again[i].rows && pieces[i].cols == again[i].cols);
        }
    }
}

TEST(GemmPieces, RunWholeWhereThePiecesWouldNotPay) {
    EXPECT_TRUE(gemm_pieces(1024, 3072, 768, 1).empty()) << "one thread";
    EXPECT_TRUE(gemm_pieces(128, 128, 64, 2).empty()) << "too small";
    EXPECT_TRUE(gemm_pieces(1024, 768, 3072, 2).empty()) << "K four times the short side";
    EXPECT_FALSE(gemm_pieces(1024, 768, 1536, 2).empty()) << "K twice the short side";
    EXPECT_TRUE(gemm_pieces(1 << 20, 16, 32, 2).empty()) << "too narrow for 2 parts of 16";
    EXPECT_FALSE(gemm_pieces(1 << 20, 17, 32, 2).empty()) << "2 parts: 16 and 1";
}

TEST(GemmPieces, AGemmInPiecesMatchesF64AndIsTheSameWhoeverTakesThePieces) {
    const Threads two(2);
    struct Case {
        bool ta, tb;
        int64_t M, N, K;
        float beta;
        bool bias;
    };
    uint64_t seed = 7;
    for (const Case c : {Case{false, false, 1024, 640, 512, 0.0f, true},
                         Case{true, false, 640, 1024, 512, 0.5f, false},
                         Case{false, true, 1000, 520, 700, 1.0f, true}}) {
        ASSERT_FALSE(gemm_pieces(c.M, c.N, c.K, 2).empty());
        const int64_t lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N, ldc = c.N;
        const std::vector<double> A = round_f32(randn(c.M * c.K, seed++)),
                                  B = round_f32(randn(c.K * c.N, seed++)),
                                  C0 = round_f32(randn(c.M * c.N, seed++)),
                                  bias = round_f32(randn(c.N, seed++));
        std::vector<double> want = C0;
        gemm<double>(c.ta, c.tb, c.M, c.N, c.K, 1.0, A.data(), lda, B.data(), ldb, c.beta,
                     want.data(), ldc, c.bias ? bias.data() : nullptr);
        const std::vector<float> Af = to_f32(A), Bf = to_f32(B), biasf = to_f32(bias);
        auto run = [&] {
            std::vector<float> C = to_f32(C0);
            gemm<float>(c.ta, c.tb, c.M, c.N, c.K, 1.0f, Af.data(), lda, Bf.data(), ldb, c.beta,
                        C.data(), ldc, c.bias ? biasf.data() : nullptr);
            return C;
        };
        const std::vector<float> got = run();
        EXPECT_TRUE(all_close("pieces vs f64", got, want, tol::gemm_f32));
        EXPECT_EQ(run(), got) << "a second run rounds differently";
        // The pieces by hand, last first, each whole on whichever thread takes
        // it: the result is the same bits.
        const std::vector<GemmPiece> pieces = gemm_pieces(c.M, c.N, c.K, 2);
        // The route is the whole GEMM's (gemm.h), as in gemm itself.
        const GemmImpl route = gemm_f32_route(c.ta, c.tb, c.M, c.N, c.K);
        std::vector<float> by_hand = to_f32(C0);
#pragma omp parallel for schedule(dynamic, 1) num_threads(2)
        for (int64_t i = int64_t(pieces.size()) - 1; i >= 0; --i) {
            const GemmPiece& p = pieces[size_t(i)];
            const float* a = c.ta ? Af.data() + p.row : Af.data() + p.row * lda;
            const float* b = c.tb ? Bf.data() + p.col * ldb : Bf.data() + p.col;
            gemm_f32_with(route, c.ta, c.tb, p.rows, p.cols, c.K, 1.0f, a, lda, b, ldb, c.beta,
                          by_hand.data() + p.row * ldc + p.col, ldc,
                          c.bias ? biasf.data() + p.col : nullptr);
        }
        EXPECT_EQ(by_hand, got) << "the pieces taken in another order by other threads";
    }
}
