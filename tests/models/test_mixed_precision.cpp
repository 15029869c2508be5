// bf16 mixed precision (Model::set_compute_dtype): the linear layers' GEMMs
// and attention's own (q k^T, P v and their gradients) take bf16-rounded
// operands and accumulate in fp32. Checked two ways:
//   - the bf16 matmul equals an fp64 product of the same rounded operands
//     (so only the rounding of the inputs differs from fp32, nothing else;
//     tests/ops/test_attention_bf16.cpp does the same for attention);
//   - every HF fixture's logits, loss and gradients stay within bf16's
//     precision of transformers' fp32 numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/dtype.h"
#include "hf_fixture.h"
#include "models/stack_model.h"
#include "ops/gemm.h"
#include "ops/matmul.h"

namespace loom::test {
namespace {

std::vector<float> random_vec(int64_t n, uint32_t seed) {
    std::mt19937 g(seed);
    std::normal_distribution<float> d(0.f, 1.f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = d(g);
    return v;
}

double round_bf16(float x) {
    return double(bf16_to_f32(f32_to_bf16(x)));
}

// out(n, o) = sum_c r(inp(n, c)) r(W(o, c)) [+ bias(o)] in double.
TEST(MixedPrecision, MatmulIsTheProductOfRoundedOperands) {
    for (auto layout : {WeightLayout::out_in, WeightLayout::in_out}) {
        const int64_t N = 37, C = 45, OC = 29;
        const auto x = random_vec(N * C, 1), w = random_vec(C * OC, 2), b = random_vec(OC, 3),
                   dy = random_vec(N * OC, 4);
        auto W = [&](int64_t o, int64_t c) {
            return layout == WeightLayout::out_in ? w[size_t(o * C + c)] : w[size_t(c * OC + o)];
        };
        std::vector<float> y(size_t(N * OC));
        matmul_forward_bf16(y.data(), x.data(), w.data(), b.data(), N, C, OC, layout);
        std::vector<float> dx(size_t(N * C)), dw(size_t(C * OC), 0.f), db(size_t(OC), 0.f);
        matmul_backward_bf16(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, C,
                             OC, layout);
        double worst_y = 0, worst_dx = 0, worst_dw = 0;
        for (int64_t n = 0; n < N; ++n)
            for (int64_t o = 0; o < OC; ++o) {
                double ref = b[size_t(o)];
                for (int64_t c = 0; c < C; ++c)
                    ref += round_bf16(x[size_t(n * C + c)]) * round_bf16(W(o, c));
                worst_y = std::max(worst_y, std::fabs(ref - y[size_t(n * OC + o)]));
            }
        for (int64_t n = 0; n < N; ++n)
            for (int64_t c = 0; c < C; ++c) {
                double ref = 0;
                for (int64_t o = 0; o < OC; ++o)
                    ref += round_bf16(dy[size_t(n * OC + o)]) * round_bf16(W(o, c));
                worst_dx = std::max(worst_dx, std::fabs(ref - dx[size_t(n * C + c)]));
            }
        for (int64_t o = 0; o < OC; ++o)
            for (int64_t c = 0; c < C; ++c) {
                double ref = 0;
                for (int64_t n = 0; n < N; ++n)
                    ref += round_bf16(dy[size_t(n * OC + o)]) * round_bf16(x[size_t(n * C + c)]);
                const size_t at =
                    layout == WeightLayout::out_in ? size_t(o * C + c) : size_t(c * OC + o);
                worst_dw = std::max(worst_dw, std::fabs(ref - dw[at]));
            }
        // fp32 accumulation of ~40 products of size ~1: a few ulps of ~10.
        EXPECT_LT(worst_y, 1e-4);
        EXPECT_LT(worst_dx, 1e-4);
        EXPECT_LT(worst_dw, 1e-4);
        // The bias gradient stays an fp32 column sum of the unrounded dy.
        for (int64_t o = 0; o < OC; ++o) {
            double ref = 0;
            for (int64_t n = 0; n < N; ++n) ref += dy[size_t(n * OC + o)];
            EXPECT_NEAR(db[size_t(o)], ref, 1e-4);
        }
    }
}

// A weight rounded once by the caller (what Linear keeps from forward for
// backward), and the input as forward rounded it (what the blocks save for
// backward), give the same bits as rounding inside; the bias gradient, summed
// in the same pass that rounds dout, is the fp32 path's column sum bit for bit.
TEST(MixedPrecision, PreRoundedWeightAndFusedBiasSumAreExact) {
    for (auto layout : {WeightLayout::out_in, WeightLayout::in_out}) {
        const int64_t N = 300, C = 70, OC = 150;  // several column blocks, threaded
        const auto x = random_vec(N * C, 5), w = random_vec(C * OC, 6), b = random_vec(OC, 7),
                   dy = random_vec(N * OC, 8);
        std::vector<uint16_t> w16(w.size());
        convert_f32_to_bf16(w16.data(), w.data(), int64_t(w.size()));
        std::vector<float> y1(size_t(N * OC)), y2(y1.size());
        matmul_forward_bf16(y1.data(), x.data(), w.data(), b.data(), N, C, OC, layout);
        std::vector<uint16_t> x16(x.size(), 0xffff), x16_ref(x.size());
        matmul_forward_bf16(y2.data(), x.data(), w.data(), b.data(), N, C, OC, layout, w16.data(),
                            x16.data());
        EXPECT_EQ(y1, y2);
        convert_f32_to_bf16(x16_ref.data(), x.data(), int64_t(x.size()));
        EXPECT_EQ(x16, x16_ref);
        std::vector<float> dx1(size_t(N * C)), dx2(dx1.size()), dw1(w.size(), 0.f),
            dw2(w.size(), 0.f), db1(size_t(OC), 0.5f), db2(db1), db_ref(db1);
        matmul_backward_bf16(dx1.data(), dw1.data(), db1.data(), dy.data(), x.data(), w.data(), N,
                             C, OC, layout);
        // x16 alone stands for the input: the fp32 input passed here is garbage.
        const std::vector<float> garbage(x.size(), 1e30f);
        matmul_backward_bf16(dx2.data(), dw2.data(), db2.data(), dy.data(), garbage.data(),
                             w.data(), N, C, OC, layout, false, w16.data(), x16.data());
        EXPECT_EQ(dx1, dx2);
        EXPECT_EQ(dw1, dw2);
        EXPECT_EQ(db1, db2);
        std::vector<float> dx_f(dx1.size()), dw_f(w.size(), 0.f);
        matmul_backward<float>(dx_f.data(), dw_f.data(), db_ref.data(), dy.data(), x.data(),
                               w.data(), N, C, OC, layout);
        EXPECT_EQ(db1, db_ref);
    }
}

// Relative error of x against ref, as ||x - ref|| / ||ref||.
double rel_l2(const float* x, const float* ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
        num += (double(x[i]) - ref[i]) * (double(x[i]) - ref[i]);
        den += double(ref[i]) * ref[i];
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The switch reaches every GEMM: each block's attention and linears, the
// head's linears and ALBERT's embedding mapping (a GPU's bf16 activations
// leave no fp32 operand for a linear left behind).
TEST(MixedPrecision, ComputeTypeReachesEveryGemm) {
    for (const std::string& name : hf_fixture_names()) {
        SCOPED_TRACE(name);
        auto model = Fixture(name).load_model();
        const auto* stack = dynamic_cast<const StackModel*>(model.get());
        ASSERT_NE(stack, nullptr);
        for (DType d : {DType::bf16, DType::f32}) {
            model->set_compute_dtype(d);
            const StackView v = stack->view();
            int linears = 0;
            auto expect = [&](const Linear* l, const char* what) {
                if (l == nullptr) return;
                EXPECT_EQ(l->compute, d) << what;
                ++linears;
            };
            for (const TransformerBlock& b : *v.blocks) {
                EXPECT_EQ(b.attn.compute, d);
                expect(&b.attn.qkv, "qkv");
                expect(&b.attn.proj, "attention output");
                expect(&b.mlp.fc, "mlp fc");
                expect(&b.mlp.proj, "mlp proj");
            }
            expect(v.embeddings.mapping, "embedding mapping");
            expect(v.head.dense, "head dense");
            expect(v.head.decoder, "head decoder");
            EXPECT_GE(linears, 4 * int(v.blocks->size()) + 1);
        }
    }
}

TEST(MixedPrecision, FixturesStayWithinBf16OfTransformers) {
    for (const std::string& name : hf_fixture_names()) {
        SCOPED_TRACE(name);
        const Fixture f(name);
        auto model = f.load_model();
        model->set_logits_scope(LogitsScope::all_positions);
        model->set_compute_dtype(DType::bf16);
        model->zero_grad();
        const LossSum loss = model->forward(f.inputs(), DropoutPlan{});
        ASSERT_GT(loss.count, 0);
        model->backward(1.0 / double(loss.count));
        const double ref_loss = double(f.expected.at("loss").data<float>()[0]);
        // bf16 keeps 8 significant bits: about 0.4% per rounding.
        EXPECT_NEAR(loss.mean(), ref_loss, 2e-2 * std::fabs(ref_loss)) << "loss";
        for (const auto& [k, out] : model->outputs()) {
            if (k.find("logits") == std::string::npos || !f.expected.count(k)) continue;
            const Tensor& ref = f.expected.at(k);
            EXPECT_LT(rel_l2(out.data<float>(), ref.data<float>(), ref.numel()), 2e-2) << k;
        }
        // Gradients: direction and size agree (each within a few percent).
        const ParamTable& t = model->params();
        // Rows whose true gradient is zero (attention key biases: softmax
        // ignores a constant per query) hold rounding noise in the reference.
        const auto noise = f.noise_level_grads();
        int checked = 0;
        for (int i = 0; i < int(t.rows().size()); ++i) {
            const auto it = f.expected.find("grad." + t.row(i).name);
            if (it == f.expected.end() || noise.count(t.row(i).name)) continue;
            const Tensor& g = it->second;
            EXPECT_LT(rel_l2(t.grad(i), g.data<float>(), g.numel()), 5e-2) << t.row(i).name;
            ++checked;
        }
        EXPECT_GT(checked, 5);
    }
}

}  // namespace
}  // namespace loom::test
