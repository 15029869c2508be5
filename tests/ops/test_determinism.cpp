// Reductions that cross rows (dweight/dbias, embedding gradients, the xent sum)
// give bit-identical results for 1 and 2 threads: fixed-order reductions.
#include <omp.h>

#include "ops/embedding.h"
#include "ops/layer_norm.h"
#include "ops/matmul.h"
#include "ops/softmax_xent.h"
#include "ops_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

// Runs f with 1 thread, then with 2, and returns both results.
template <typename F>
std::pair<std::vector<float>, std::vector<float>> one_and_two_threads(F f) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    std::vector<float> a = f();
    omp_set_num_threads(2);
    std::vector<float> b = f();
    omp_set_num_threads(saved);
    return {a, b};
}

}  // namespace

TEST(Determinism, LayerNormParameterGradients) {
    const int64_t N = 1000, C = 768;
    const std::vector<float> x = to_f32(randn(N * C, 1)), w = to_f32(randn(C, 2)),
                             b = to_f32(randn(C, 3)), dout = to_f32(randn(N * C, 4));
    auto [one, two] = one_and_two_threads([&] {
        std::vector<float> out(x.size()), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N)),
            dx(x.size()), dwb(static_cast<size_t>(2 * C), 0.0f);
        layer_norm_forward<float>(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                  b.data(), N, C, 1e-5);
        layer_norm_backward<float>(dx.data(), dwb.data(), dwb.data() + C, dout.data(), x.data(),
                                   w.data(), mean.data(), rstd.data(), N, C);
        return dwb;
    });
    EXPECT_TRUE(all_close("dweight|dbias", two, one, Tol{0, 0}));
}

TEST(Determinism, EmbeddingGradientAndBias) {
    const int64_t N = 2048, V = 100, C = 768;
    std::vector<int64_t> ids(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) ids[size_t(n)] = (n * 37) % V;
    const std::vector<float> dout = to_f32(randn(N * C, 5));
    auto [one, two] = one_and_two_threads([&] {
        std::vector<float> dt(static_cast<size_t>(V * C), 0.0f), db(static_cast<size_t>(C), 0.0f),
            dw(static_cast<size_t>(C * C), 0.0f);
        embedding_backward<float>(dt.data(), ids.data(), dout.data(), N, V, C);
        // dbias of a linear: column sums of dout.
        matmul_backward<float>(nullptr, dw.data(), db.data(), dout.data(), dout.data(), dw.data(),
                               N, C, C, WeightLayout::out_in);
        dt.insert(dt.end(), db.begin(), db.end());
        return dt;
    });
    EXPECT_TRUE(all_close("dtable|dbias", two, one, Tol{0, 0}));
}

TEST(Determinism, XentLossSum) {
    const int64_t N = 257, V = 3001;
    const std::vector<float> logits = to_f32(randn(N * V, 6, 3.0));
    std::vector<int64_t> targets(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) targets[size_t(n)] = (n * 13) % V;
    auto [one, two] = one_and_two_threads([&] {
        const XentSum s = softmax_xent_forward<float>(nullptr, logits.data(), targets.data(), N, V);
        return std::vector<float>{float(s.loss_sum), float(s.loss_sum - double(float(s.loss_sum)))};
    });
    EXPECT_TRUE(all_close("loss_sum", two, one, Tol{0, 0}));
}
