// Finite-difference gradient checks in fp64 for every op except attention
// (test_gradcheck_attention.cpp). Each check projects the op's output on fixed
// random weights w (loss = <w, out>), runs backward with dout = w, and compares
// every input gradient with central differences. Shapes are small and odd.
// Accumulating gradients start from random values, which are subtracted again,
// so the += rules are checked along the way.
#include "ops/activation.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layer_norm.h"
#include "ops/matmul.h"
#include "ops/softmax_xent.h"
#include "ops_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

// acc - start: what an accumulating backward added.
std::vector<double> added(const std::vector<double>& acc, const std::vector<double>& start) {
    std::vector<double> d(acc.size());
    for (size_t i = 0; i < acc.size(); ++i) d[i] = acc[i] - start[i];
    return d;
}

void check_matmul(WeightLayout layout, bool with_bias) {
    const int64_t N = 7, C = 5, OC = 3;
    std::vector<double> inp = randn(N * C, 1), weight = randn(OC * C, 2), bias = randn(OC, 3);
    const std::vector<double> w = randn(N * OC, 4);
    std::vector<double> out(size_t(N * OC));
    auto loss = [&] {
        matmul_forward<double>(out.data(), inp.data(), weight.data(),
                               with_bias ? bias.data() : nullptr, N, C, OC, layout);
        return dot(w, out.data());
    };
    const std::vector<double> dw0 = randn(OC * C, 5), db0 = randn(OC, 6);
    std::vector<double> dinp(size_t(N * C), std::nan("")), dweight = dw0, dbias = db0;
    matmul_backward<double>(dinp.data(), dweight.data(), with_bias ? dbias.data() : nullptr,
                            w.data(), inp.data(), weight.data(), N, C, OC, layout);
    const std::string tag = std::string(layout == WeightLayout::out_in ? "out_in" : "in_out") +
                            (with_bias ? " bias" : " no bias");
    EXPECT_TRUE(all_close(tag + " dinp", dinp, numeric_grad(loss, inp.data(), N * C), tol::fd));
    EXPECT_TRUE(all_close(tag + " dweight", added(dweight, dw0),
                          numeric_grad(loss, weight.data(), OC * C), tol::fd));
    if (with_bias)
        EXPECT_TRUE(all_close(tag + " dbias", added(dbias, db0),
                              numeric_grad(loss, bias.data(), OC), tol::fd));
    else
        EXPECT_EQ(dbias, db0);

    // accumulate_dinp adds to what is there; null dinp skips the input gradient.
    std::vector<double> dinp_acc = randn(N * C, 7);
    const std::vector<double> dinp_start = dinp_acc;
    std::vector<double> dweight2 = dw0;
    matmul_backward<double>(dinp_acc.data(), dweight2.data(), nullptr, w.data(), inp.data(),
                            weight.data(), N, C, OC, layout, true);
    EXPECT_TRUE(all_close(tag + " accumulated dinp", added(dinp_acc, dinp_start), dinp, tol::fd));
    std::vector<double> dweight3 = dw0;
    matmul_backward<double>(nullptr, dweight3.data(), nullptr, w.data(), inp.data(),
                            weight.data(), N, C, OC, layout);
    EXPECT_TRUE(all_close(tag + " dweight without dinp", dweight3, dweight2, Tol{0, 0}));
}

}  // namespace

TEST(GradCheck, MatmulOutInWithBias) { check_matmul(WeightLayout::out_in, true); }
TEST(GradCheck, MatmulOutInNoBias) { check_matmul(WeightLayout::out_in, false); }
TEST(GradCheck, MatmulInOutWithBias) { check_matmul(WeightLayout::in_out, true); }
TEST(GradCheck, MatmulInOutNoBias) { check_matmul(WeightLayout::in_out, false); }

TEST(GradCheck, LayerNorm) {
    // N = 37 rows spans two of the backward's 32-row reduction groups.
    const int64_t N = 37, C = 5;
    std::vector<double> inp = randn(N * C, 11, 2.0), weight = randn(C, 12), bias = randn(C, 13);
    for (int64_t i = 0; i < N * C; ++i) inp[size_t(i)] += double(i % 3);  // non-zero means
    const std::vector<double> w = randn(N * C, 14);
    std::vector<double> out(size_t(N * C)), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
    auto loss = [&] {
        layer_norm_forward<double>(out.data(), mean.data(), rstd.data(), inp.data(),
                                   weight.data(), bias.data(), N, C, 1e-5);
        return dot(w, out.data());
    };
    loss();
    const std::vector<double> dw0 = randn(C, 15), db0 = randn(C, 16);
    std::vector<double> dinp(size_t(N * C)), dweight = dw0, dbias = db0;
    layer_norm_backward<double>(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(),
                                weight.data(), mean.data(), rstd.data(), N, C);
    EXPECT_TRUE(all_close("dinp", dinp, numeric_grad(loss, inp.data(), N * C), tol::fd));
    EXPECT_TRUE(all_close("dweight", added(dweight, dw0), numeric_grad(loss, weight.data(), C),
                          tol::fd));
    EXPECT_TRUE(all_close("dbias", added(dbias, db0), numeric_grad(loss, bias.data(), C),
                          tol::fd));

    std::vector<double> dinp_acc = randn(N * C, 17);
    const std::vector<double> start = dinp_acc;
    std::vector<double> dweight2 = dw0, dbias2 = db0;
    layer_norm_backward<double>(dinp_acc.data(), dweight2.data(), dbias2.data(), w.data(),
                                inp.data(), weight.data(), mean.data(), rstd.data(), N, C, true);
    EXPECT_TRUE(all_close("accumulated dinp", added(dinp_acc, start), dinp, Tol{1e-14, 1e-12}));
}

TEST(GradCheck, EachActivation) {
    const int64_t n = 41;
    for (Activation a :
         {Activation::gelu_erf, Activation::gelu_tanh, Activation::relu, Activation::tanh}) {
        // Spread over [-5, 5] and keep away from relu's kink at 0.
        std::vector<double> x = uniform(n, 21, -5.0, 5.0);
        for (double& v : x)
            if (std::fabs(v) < 1e-3) v = 0.5;
        const std::vector<double> w = randn(n, 22);
        std::vector<double> out(static_cast<size_t>(n));
        auto loss = [&] {
            activation_forward<double>(out.data(), x.data(), n, a);
            return dot(w, out.data());
        };
        std::vector<double> dinp(static_cast<size_t>(n));
        activation_backward<double>(dinp.data(), x.data(), w.data(), n, a);
        EXPECT_TRUE(all_close(std::string(activation_name(a)), dinp,
                              numeric_grad(loss, x.data(), n), tol::fd));
        // In place: dinp aliasing dout.
        std::vector<double> inplace = w;
        activation_backward<double>(inplace.data(), x.data(), inplace.data(), n, a);
        EXPECT_TRUE(all_close(std::string(activation_name(a)) + " in place", inplace, dinp,
                              Tol{0, 0}));
    }
}

TEST(GradCheck, SoftmaxXentWithIgnoredRows) {
    const int64_t N = 6, V = 7;
    std::vector<double> logits = randn(N * V, 31, 3.0);
    const std::vector<int64_t> targets = {3, k_ignore_index, 0, 6, k_ignore_index, 2};
    const double scale = 1.0 / 4.0;  // mean over the 4 labelled rows
    auto loss = [&] {
        return scale * softmax_xent_forward<double>(nullptr, logits.data(), targets.data(), N, V)
                           .loss_sum;
    };
    std::vector<double> dlogits(size_t(N * V), std::nan(""));
    softmax_xent_backward<double>(dlogits.data(), logits.data(), targets.data(), N, V, scale);
    EXPECT_TRUE(all_close("dlogits", dlogits, numeric_grad(loss, logits.data(), N * V), tol::fd));
    for (int64_t v = 0; v < V; ++v) EXPECT_EQ(dlogits[size_t(1 * V + v)], 0.0);

    std::vector<double> losses(size_t(N), -1.0);
    const XentSum s = softmax_xent_forward<double>(losses.data(), logits.data(), targets.data(),
                                                   N, V);
    EXPECT_EQ(s.count, 4);
    EXPECT_EQ(losses[1], 0.0);
    EXPECT_EQ(losses[4], 0.0);
    // Row 0 by hand: log(sum exp) - x[target].
    double se = 0;
    for (int64_t v = 0; v < V; ++v) se += std::exp(logits[size_t(v)]);
    EXPECT_NEAR(losses[0], std::log(se) - logits[3], 1e-12);
}

TEST(GradCheck, EmbeddingWithPaddingIdx) {
    const int64_t N = 9, V = 6, C = 5, pad = 2;
    const std::vector<int64_t> ids = {0, 2, 5, 5, 1, 2, 3, 0, 5};
    std::vector<double> table = randn(V * C, 41);
    const std::vector<double> w = randn(N * C, 42);
    std::vector<double> out(size_t(N * C));
    auto loss = [&] {
        embedding_forward<double>(out.data(), ids.data(), table.data(), N, V, C);
        return dot(w, out.data());
    };
    const std::vector<double> start = randn(V * C, 43);
    std::vector<double> dtable = start;
    embedding_backward<double>(dtable.data(), ids.data(), w.data(), N, V, C, pad);
    std::vector<double> num = numeric_grad(loss, table.data(), V * C);
    std::vector<double> got = added(dtable, start);
    // torch's padding_idx: that row gets no gradient although it was used.
    for (int64_t c = 0; c < C; ++c) {
        EXPECT_EQ(got[size_t(pad * C + c)], 0.0);
        EXPECT_NE(num[size_t(pad * C + c)], 0.0);
        num[size_t(pad * C + c)] = 0.0;
    }
    EXPECT_TRUE(all_close("dtable", got, num, tol::fd));

    // accumulate = true adds the lookup to what out holds (position embeddings).
    std::vector<double> base = randn(N * C, 44), acc = base;
    embedding_forward<double>(acc.data(), ids.data(), table.data(), N, V, C, true);
    loss();
    for (int64_t i = 0; i < N * C; ++i)
        EXPECT_DOUBLE_EQ(acc[size_t(i)], base[size_t(i)] + out[size_t(i)]);
}

TEST(GradCheck, Dropout) {
    const int64_t B = 3, per_sample = 11;
    DropoutSpec d;
    d.p = 0.3f;
    d.stream = PhiloxStream(7, 2, 5);
    d.sample_offset = 4;
    std::vector<double> x = randn(B * per_sample, 51);
    const std::vector<double> w = randn(B * per_sample, 52);
    std::vector<double> out(x.size());
    auto loss = [&] {
        dropout_forward<double>(out.data(), x.data(), B, per_sample, d);
        return dot(w, out.data());
    };
    std::vector<double> dx(x.size());
    dropout_backward<double>(dx.data(), w.data(), B, per_sample, d);
    EXPECT_TRUE(all_close("dinp", dx, numeric_grad(loss, x.data(), B * per_sample), tol::fd));
}

TEST(GradCheck, Residual) {
    const int64_t n = 13;
    std::vector<double> a = randn(n, 61), b = randn(n, 62);
    const std::vector<double> w = randn(n, 63);
    std::vector<double> out(static_cast<size_t>(n));
    auto loss = [&] {
        residual_forward<double>(out.data(), a.data(), b.data(), n);
        return dot(w, out.data());
    };
    // Residual backward is dout to both branches (add_inplace into each).
    std::vector<double> da(size_t(n), 0.0), db = randn(n, 64);
    const std::vector<double> db0 = db;
    add_inplace<double>(da.data(), w.data(), n);
    add_inplace<double>(db.data(), w.data(), n);
    EXPECT_TRUE(all_close("da", da, numeric_grad(loss, a.data(), n), tol::fd));
    EXPECT_TRUE(all_close("db", added(db, db0), numeric_grad(loss, b.data(), n), tol::fd));
    std::vector<double> s = w;
    scale_inplace<double>(s.data(), -2.5, n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(s[size_t(i)], -2.5 * w[size_t(i)]);
}
