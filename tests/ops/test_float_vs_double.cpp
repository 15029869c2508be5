// The fp32 kernels (the fast path) against the same ops in fp64 on identical
// inputs, forward and backward. Sizes are large enough to take the threaded and
// vectorised paths (and odd, so vector tails run too).
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/layer_norm.h"
#include "ops/matmul.h"
#include "ops/softmax_xent.h"
#include "ops_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

// Both precisions of one buffer, from the same fp32-representable values.
struct Pair {
    std::vector<double> d;
    std::vector<float> f;
    explicit Pair(std::vector<double> v) : d(round_f32(std::move(v))), f(to_f32(d)) {}
    Pair(int64_t n, double fill) : d(size_t(n), fill), f(size_t(n), float(fill)) {}
};

}  // namespace

TEST(FloatVsDouble, Matmul) {
    const int64_t N = 97, C = 301, OC = 131;
    for (WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
        Pair inp(randn(N * C, 1)), weight(randn(OC * C, 2, 0.05)), bias(randn(OC, 3));
        Pair out(N * OC, 0.0), dout(randn(N * OC, 4));
        matmul_forward<float>(out.f.data(), inp.f.data(), weight.f.data(), bias.f.data(), N, C, OC,
                              layout);
        matmul_forward<double>(out.d.data(), inp.d.data(), weight.d.data(), bias.d.data(), N, C, OC,
                               layout);
        EXPECT_TRUE(all_close("out", out.f, out.d, tol::f32_fwd));
        Pair dinp(N * C, 0.0), dweight(randn(OC * C, 5)), dbias(randn(OC, 6));
        matmul_backward<float>(dinp.f.data(), dweight.f.data(), dbias.f.data(), dout.f.data(),
                               inp.f.data(), weight.f.data(), N, C, OC, layout);
        matmul_backward<double>(dinp.d.data(), dweight.d.data(), dbias.d.data(), dout.d.data(),
                                inp.d.data(), weight.d.data(), N, C, OC, layout);
        EXPECT_TRUE(all_close("dinp", dinp.f, dinp.d, tol::f32_bwd));
        EXPECT_TRUE(all_close("dweight", dweight.f, dweight.d, tol::f32_bwd));
        EXPECT_TRUE(all_close("dbias", dbias.f, dbias.d, tol::f32_bwd));
    }
}

TEST(FloatVsDouble, LayerNorm) {
    const int64_t N = 101, C = 768;
    std::vector<double> x = randn(N * C, 11, 3.0);
    for (int64_t i = 0; i < N * C; ++i) x[size_t(i)] += 5.0;  // a large mean, as residuals have
    Pair inp(x), weight(randn(C, 12)), bias(randn(C, 13)), dout(randn(N * C, 14));
    Pair out(N * C, 0.0), mean(N, 0.0), rstd(N, 0.0);
    layer_norm_forward<float>(out.f.data(), mean.f.data(), rstd.f.data(), inp.f.data(),
                              weight.f.data(), bias.f.data(), N, C, 1e-12);
    layer_norm_forward<double>(out.d.data(), mean.d.data(), rstd.d.data(), inp.d.data(),
                               weight.d.data(), bias.d.data(), N, C, 1e-12);
    EXPECT_TRUE(all_close("out", out.f, out.d, tol::f32_fwd));
    EXPECT_TRUE(all_close("mean", mean.f, mean.d, tol::f32_fwd));
    EXPECT_TRUE(all_close("rstd", rstd.f, rstd.d, tol::f32_fwd));
    Pair dinp(N * C, 0.0), dweight(C, 0.5), dbias(C, -0.5);
    layer_norm_backward<float>(dinp.f.data(), dweight.f.data(), dbias.f.data(), dout.f.data(),
                               inp.f.data(), weight.f.data(), mean.f.data(), rstd.f.data(), N, C);
    layer_norm_backward<double>(dinp.d.data(), dweight.d.data(), dbias.d.data(), dout.d.data(),
                                inp.d.data(), weight.d.data(), mean.d.data(), rstd.d.data(), N, C);
    EXPECT_TRUE(all_close("dinp", dinp.f, dinp.d, tol::f32_bwd));
    EXPECT_TRUE(all_close("dweight", dweight.f, dweight.d, tol::f32_bwd));
    EXPECT_TRUE(all_close("dbias", dbias.f, dbias.d, tol::f32_bwd));
}

TEST(FloatVsDouble, Activations) {
    const int64_t n = 100003;
    Pair x(uniform(n, 21, -9.0, 9.0)), dout(randn(n, 22));
    for (Activation a :
         {Activation::gelu_erf, Activation::gelu_tanh, Activation::relu, Activation::tanh}) {
        Pair out(n, 0.0), dinp(n, 0.0);
        activation_forward<float>(out.f.data(), x.f.data(), n, a);
        activation_forward<double>(out.d.data(), x.d.data(), n, a);
        EXPECT_TRUE(
            all_close(std::string(activation_name(a)) + " forward", out.f, out.d, tol::f32_fwd));
        // The bf16-storing forward is the fp32 forward rounded, bit for bit.
        std::vector<uint16_t> out16(static_cast<size_t>(n), 0xffff), want16(static_cast<size_t>(n));
        activation_forward_bf16(out16.data(), x.f.data(), n, a);
        convert_f32_to_bf16(want16.data(), out.f.data(), n);
        EXPECT_EQ(out16, want16) << activation_name(a) << " forward to bf16";
        activation_backward<float>(dinp.f.data(), x.f.data(), dout.f.data(), n, a);
        activation_backward<double>(dinp.d.data(), x.d.data(), dout.d.data(), n, a);
        EXPECT_TRUE(
            all_close(std::string(activation_name(a)) + " backward", dinp.f, dinp.d, tol::f32_fwd));
    }
}

TEST(FloatVsDouble, Attention) {
    const int64_t B = 3, T = 33, NH = 4, HS = 16, C = NH * HS, ld = 3 * C;
    const AttnShape s{B, T, NH, HS};
    std::vector<int64_t> pad(size_t(B * T), 1);
    for (int64_t t = 25; t < T; ++t) pad[size_t(1 * T + t)] = 0;
    for (bool causal : {false, true}) {
        AttnMask mask{pad.data(), causal};
        DropoutSpec drop;
        drop.p = 0.1f;
        drop.stream = PhiloxStream(5, 1, 2);
        Pair qkv(randn(B * T * ld, 31)), dout(randn(B * T * C, 32));
        Pair out(B * T * C, 0.0), att(B * NH * T * T, 0.0), scratch(B * NH * T * T, 0.0);
        attention_forward<float>(out.f.data(), att.f.data(), qkv.f.data(), qkv.f.data() + C,
                                 qkv.f.data() + 2 * C, ld, s, mask, drop);
        attention_forward<double>(out.d.data(), att.d.data(), qkv.d.data(), qkv.d.data() + C,
                                  qkv.d.data() + 2 * C, ld, s, mask, drop);
        EXPECT_TRUE(all_close("att", att.f, att.d, tol::f32_fwd));
        EXPECT_TRUE(all_close("out", out.f, out.d, tol::f32_fwd));
        Pair dqkv(B * T * ld, 0.0);
        attention_backward<float>(dqkv.f.data(), dqkv.f.data() + C, dqkv.f.data() + 2 * C,
                                  scratch.f.data(), dout.f.data(), att.f.data(), qkv.f.data(),
                                  qkv.f.data() + C, qkv.f.data() + 2 * C, ld, s, mask, drop);
        attention_backward<double>(dqkv.d.data(), dqkv.d.data() + C, dqkv.d.data() + 2 * C,
                                   scratch.d.data(), dout.d.data(), att.d.data(), qkv.d.data(),
                                   qkv.d.data() + C, qkv.d.data() + 2 * C, ld, s, mask, drop);
        EXPECT_TRUE(all_close(causal ? "dqkv causal" : "dqkv", dqkv.f, dqkv.d, tol::f32_bwd));
    }
}

TEST(FloatVsDouble, SoftmaxXent) {
    const int64_t N = 37, V = 1999;
    Pair logits(randn(N * V, 41, 4.0));
    std::vector<int64_t> targets(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n)
        targets[size_t(n)] = n % 5 == 3 ? k_ignore_index : (n * 131) % V;
    Pair losses(N, 0.0);
    const XentSum sf =
        softmax_xent_forward<float>(losses.f.data(), logits.f.data(), targets.data(), N, V);
    const XentSum sd =
        softmax_xent_forward<double>(losses.d.data(), logits.d.data(), targets.data(), N, V);
    EXPECT_EQ(sf.count, sd.count);
    EXPECT_NEAR(sf.loss_sum, sd.loss_sum, 1e-6 * std::fabs(sd.loss_sum));
    EXPECT_TRUE(all_close("losses", losses.f, losses.d, tol::f32_fwd));
    Pair dlogits(N * V, 0.0);
    softmax_xent_backward<float>(dlogits.f.data(), logits.f.data(), targets.data(), N, V, 0.03);
    softmax_xent_backward<double>(dlogits.d.data(), logits.d.data(), targets.data(), N, V, 0.03);
    EXPECT_TRUE(all_close("dlogits", dlogits.f, dlogits.d, tol::f32_fwd));
}

TEST(FloatVsDouble, EmbeddingAndDropout) {
    const int64_t N = 300, V = 50, C = 129;
    std::vector<int64_t> ids(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) ids[size_t(n)] = (n * 7) % V;
    Pair table(randn(V * C, 51)), out(N * C, 0.0), dout(randn(N * C, 52)), dtable(V * C, 0.25);
    embedding_forward<float>(out.f.data(), ids.data(), table.f.data(), N, V, C);
    embedding_forward<double>(out.d.data(), ids.data(), table.d.data(), N, V, C);
    EXPECT_TRUE(all_close("embedding out", out.f, out.d, Tol{0, 0}));
    embedding_backward<float>(dtable.f.data(), ids.data(), dout.f.data(), N, V, C, 0);
    embedding_backward<double>(dtable.d.data(), ids.data(), dout.d.data(), N, V, C, 0);
    EXPECT_TRUE(all_close("dtable", dtable.f, dtable.d, tol::f32_bwd));

    DropoutSpec d;
    d.p = 0.25f;
    d.stream = PhiloxStream(3, 4, 5);
    Pair dx(N * C, 0.0);
    dropout_forward<float>(dx.f.data(), out.f.data(), N, C, d);
    dropout_forward<double>(dx.d.data(), out.d.data(), N, C, d);
    EXPECT_TRUE(all_close("dropout", dx.f, dx.d, tol::f32_fwd));
}
