// The CPU's NnOps table (ops/nn_ops.h) against the ops/<op>.h kernels it
// binds: each entry, called as the nn modules call it, gives bit for bit
// what the op gives called directly, in every compute mode the CPU has
// (f32, bf16 operands with and without kept roundings, fp16 operands), and
// refuses activations the CPU does not keep. tests/cuda/test_cuda_nn_ops.cpp
// holds the CUDA table to these same entries.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/check.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/attention_rows.h"
#include "ops/device_ops.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/layer_norm.h"
#include "ops/matmul.h"
#include "ops/softmax_xent.h"
#include "ops_test_util.h"

namespace loom {
namespace {

std::vector<float> rnd(int64_t n, uint64_t seed) {
    const std::vector<double> d = test::randn(n, seed);
    return std::vector<float>(d.begin(), d.end());
}

void expect_same(const char* what, const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size()) << what;
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << what;
}

const OpCtx k_cpu{&cpu_backend(), DType::f32};
const NnOps& ops() {
    return k_cpu.nn();
}

TEST(NnOpsCpu, MatmulEntriesAreTheCpuGemmsInEveryComputeMode) {
    const int64_t N = 6, C = 10, OC = 7;
    const auto x = rnd(N * C, 1), w = rnd(OC * C, 2), b = rnd(OC, 3), dy = rnd(N * OC, 4);
    for (WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
        for (DType t : {DType::f32, DType::bf16, DType::f16}) {
            SCOPED_TRACE(std::string(dtype_name(t)));
            std::vector<float> y(size_t(N * OC), 0.0f), y_ref(y.size());
            ops().matmul_forward(k_cpu, t, y.data(), x.data(), w.data(), b.data(), N, C, OC, layout,
                                 {});
            if (t == DType::bf16)
                matmul_forward_bf16(y_ref.data(), x.data(), w.data(), b.data(), N, C, OC, layout);
            else if (t == DType::f16)
                matmul_forward_fp16(y_ref.data(), x.data(), w.data(), b.data(), N, C, OC, layout);
            else
                matmul_forward(y_ref.data(), x.data(), w.data(), b.data(), N, C, OC, layout);
            expect_same("y", y, y_ref);

            std::vector<float> dx(size_t(N * C), 0.5f), dw(size_t(OC * C), 0.25f),
                db(size_t(OC), 0.0f);
            auto dx_ref = dx, dw_ref = dw, db_ref = db;
            ops().matmul_backward(k_cpu, t, dx.data(), dw.data(), db.data(), dy.data(), x.data(),
                                  w.data(), N, C, OC, layout, true, {});
            if (t == DType::bf16)
                matmul_backward_bf16(dx_ref.data(), dw_ref.data(), db_ref.data(), dy.data(),
                                     x.data(), w.data(), N, C, OC, layout, true);
            else if (t == DType::f16)
                matmul_backward_fp16(dx_ref.data(), dw_ref.data(), db_ref.data(), dy.data(),
                                     x.data(), w.data(), N, C, OC, layout, true);
            else
                matmul_backward(dx_ref.data(), dw_ref.data(), db_ref.data(), dy.data(), x.data(),
                                w.data(), N, C, OC, layout, true);
            expect_same("dx", dx, dx_ref);
            expect_same("dw", dw, dw_ref);
            expect_same("db", db, db_ref);
        }
    }
}

// bf16 with the roundings a linear keeps: the weight's, the input's written by
// forward, and forward from an input given only rounded.
TEST(NnOpsCpu, Bf16GemmTakesAndKeepsItsRoundings) {
    const int64_t N = 5, C = 8, OC = 6;
    const auto x = rnd(N * C, 5), w = rnd(OC * C, 6);
    std::vector<uint16_t> w16(size_t(OC * C), 0), x16(size_t(N * C), 0), x16_ref(x16.size());
    convert_f32_to_bf16(w16.data(), w.data(), OC * C);
    convert_f32_to_bf16(x16_ref.data(), x.data(), N * C);
    std::vector<float> y(size_t(N * OC), 0.0f), y_ref(y.size()), y_rounded(y.size());
    ops().matmul_forward(k_cpu, DType::bf16, y.data(), x.data(), w.data(), nullptr, N, C, OC,
                         WeightLayout::out_in, GemmRounded{w16.data(), x16.data(), nullptr});
    matmul_forward_bf16(y_ref.data(), x.data(), w.data(), nullptr, N, C, OC, WeightLayout::out_in);
    expect_same("y with kept roundings", y, y_ref);
    EXPECT_EQ(x16, x16_ref) << "forward keeps the input's bf16 rounding";
    ops().matmul_forward(k_cpu, DType::bf16, y_rounded.data(), nullptr, w.data(), nullptr, N, C, OC,
                         WeightLayout::out_in, GemmRounded{nullptr, nullptr, x16.data()});
    expect_same("y from the rounded input", y_rounded, y_ref);
    EXPECT_THROW(
        ops().matmul_forward(k_cpu, DType::f32, y.data(), x.data(), w.data(), nullptr, N, C, OC,
                             WeightLayout::out_in, GemmRounded{w16.data(), nullptr, nullptr}),
        Error);
}

TEST(NnOpsCpu, LayerNormActivationAndElementwiseEntriesAreTheCpuOps) {
    const int64_t N = 4, C = 12;
    const auto x = rnd(N * C, 7), w = rnd(C, 8), b = rnd(C, 9), dy = rnd(N * C, 10);
    std::vector<float> y(size_t(N * C), 0.0f), y_ref(y.size()), mean(size_t(N), 0.0f),
        rstd(size_t(N), 0.0f), mean_ref(mean.size()), rstd_ref(rstd.size());
    ops().layer_norm_forward(k_cpu, y.data(), mean.data(), rstd.data(), x.data(), w.data(),
                             b.data(), N, C, 1e-5);
    layer_norm_forward(y_ref.data(), mean_ref.data(), rstd_ref.data(), x.data(), w.data(), b.data(),
                       N, C, 1e-5);
    expect_same("ln y", y, y_ref);
    expect_same("ln rstd", rstd, rstd_ref);
    std::vector<float> dx(size_t(N * C), 1.0f), dw(size_t(C), 0.0f), db(size_t(C), 0.0f);
    auto dx_ref = dx, dw_ref = dw, db_ref = db;
    ops().layer_norm_backward(k_cpu, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                              mean.data(), rstd.data(), N, C, true);
    layer_norm_backward(dx_ref.data(), dw_ref.data(), db_ref.data(), dy.data(), x.data(), w.data(),
                        mean.data(), rstd.data(), N, C, true);
    expect_same("ln dx", dx, dx_ref);
    expect_same("ln dw", dw, dw_ref);

    for (Activation a : {Activation::gelu_erf, Activation::gelu_tanh, Activation::tanh}) {
        ops().activation_forward(k_cpu, y.data(), DType::f32, x.data(), N * C, a);
        activation_forward(y_ref.data(), x.data(), N * C, a);
        expect_same("activation", y, y_ref);
        std::vector<uint16_t> y16(size_t(N * C), 0), y16_ref(y16.size());
        ops().activation_forward(k_cpu, y16.data(), DType::bf16, x.data(), N * C, a);
        activation_forward_bf16(y16_ref.data(), x.data(), N * C, a);
        EXPECT_EQ(y16, y16_ref) << "activation to bf16";
        ops().activation_backward(k_cpu, dx.data(), x.data(), dy.data(), N * C, a);
        activation_backward(dx_ref.data(), x.data(), dy.data(), N * C, a);
        expect_same("activation backward", dx, dx_ref);
    }

    ops().residual_forward(k_cpu, y.data(), x.data(), dy.data(), N * C);
    residual_forward(y_ref.data(), x.data(), dy.data(), N * C);
    expect_same("residual", y, y_ref);
    ops().add_inplace(k_cpu, y.data(), x.data(), N * C);
    add_inplace(y_ref.data(), x.data(), N * C);
    expect_same("add_inplace", y, y_ref);
    ops().add_bias(k_cpu, y.data(), b.data(), N, C);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c) y_ref[size_t(n * C + c)] += b[size_t(c)];
    expect_same("add_bias", y, y_ref);
}

TEST(NnOpsCpu, DropoutEmbeddingAndCrossEntropyEntriesAreTheCpuOps) {
    const int64_t B = 3, T = 4, C = 5, V = 9;
    const auto x = rnd(B * T * C, 11);
    DropoutSpec d;
    d.p = 0.3f;
    d.stream = PhiloxStream(7, 2, 5);
    d.sample_offset = 4;
    std::vector<float> y(x.size()), y_ref(x.size());
    ops().dropout_forward(k_cpu, y.data(), x.data(), B, T * C, d);
    dropout_forward(y_ref.data(), x.data(), B, T * C, d);
    expect_same("dropout", y, y_ref);
    ops().dropout_backward(k_cpu, y.data(), x.data(), B, T * C, d);
    dropout_backward(y_ref.data(), x.data(), B, T * C, d);
    expect_same("dropout backward", y, y_ref);
    const int64_t rows[] = {1, 6, 11};
    ops().dropout_rows(k_cpu, y.data(), x.data(), rows, 3, T, C, d);
    dropout_rows(y_ref.data(), x.data(), rows, 3, T, C, d);
    expect_same("dropout rows", y, y_ref);

    const std::vector<int64_t> ids = {0, 3, 8, 3, 1, 2, 7, 0, 5, 4, 3, 6};
    const auto table = rnd(V * C, 12);
    ops().embedding_forward(k_cpu, y.data(), ids.data(), table.data(), B * T, V, C, true);
    embedding_forward(y_ref.data(), ids.data(), table.data(), B * T, V, C, true);
    expect_same("embedding", y, y_ref);
    std::vector<float> dt(table.size(), 0.0f), dt_ref(table.size(), 0.0f);
    ops().embedding_backward(k_cpu, dt.data(), ids.data(), x.data(), B * T, V, C, 3);
    embedding_backward(dt_ref.data(), ids.data(), x.data(), B * T, V, C, 3);
    expect_same("embedding backward", dt, dt_ref);

    const auto logits = rnd(B * T * V, 13);
    std::vector<int64_t> targets = {1, k_ignore_index, 8, 0, 2, 2, 7, 3, k_ignore_index, 4, 5, 6};
    std::vector<float> losses(size_t(B * T), 0.0f), losses_ref(losses.size());
    const XentSum s =
        ops().softmax_xent_forward(k_cpu, losses.data(), logits.data(), targets.data(), B * T, V);
    const XentSum s_ref =
        softmax_xent_forward<float>(losses_ref.data(), logits.data(), targets.data(), B * T, V);
    EXPECT_EQ(s.loss_sum, s_ref.loss_sum);
    EXPECT_EQ(s.count, 10);
    expect_same("losses", losses, losses_ref);
    std::vector<float> dl(logits.size()), dl_ref(logits.size());
    ops().softmax_xent_backward(k_cpu, dl.data(), logits.data(), targets.data(), B * T, V, 0.1);
    softmax_xent_backward<float>(dl_ref.data(), logits.data(), targets.data(), B * T, V, 0.1);
    expect_same("dlogits", dl, dl_ref);
}

TEST(NnOpsCpu, AttentionEntriesAreTheCpuKernelsForEachOperandType) {
    const AttnShape s{2, 5, 2, 3};
    const int64_t C = s.NH * s.HS, ld = 3 * C, N = s.B * s.T;
    const auto qkv = rnd(N * ld, 14), dy = rnd(N * C, 15);
    const std::vector<int64_t> pad = {1, 1, 1, 0, 0, 1, 1, 1, 1, 1};
    const AttnMask mask{pad.data(), false};
    DropoutSpec d;
    d.p = 0.2f;
    d.stream = PhiloxStream(3, 1, 2);
    for (DType t : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(std::string(dtype_name(t)));
        std::vector<float> y(size_t(N * C), 0.0f), y_ref(y.size()),
            att(size_t(s.B * s.NH * s.T * s.T), 0.0f), att_ref(att.size());
        const float *q = qkv.data(), *k = q + C, *v = q + 2 * C;
        ops().attention_forward(k_cpu, t, y.data(), att.data(), q, k, v, ld, s, mask, d);
        (t == DType::bf16 ? attention_forward_bf16 : attention_forward<float>)(y_ref.data(),
                                                                               att_ref.data(), q, k,
                                                                               v, ld, s, mask, d);
        expect_same("attention y", y, y_ref);
        expect_same("attention probabilities", att, att_ref);
        std::vector<float> dqkv(qkv.size()), dqkv_ref(qkv.size()), scratch(att.size());
        ops().attention_backward(k_cpu, t, dqkv.data(), dqkv.data() + C, dqkv.data() + 2 * C,
                                 scratch.data(), dy.data(), att.data(), q, k, v, ld, s, mask, d);
        (t == DType::bf16 ? attention_backward_bf16
                          : attention_backward<float>)(dqkv_ref.data(), dqkv_ref.data() + C,
                                                       dqkv_ref.data() + 2 * C, scratch.data(),
                                                       dy.data(), att.data(), q, k, v, ld, s, mask,
                                                       d);
        expect_same("attention dqkv", dqkv, dqkv_ref);
    }
    const int64_t rows[] = {0, 7};
    const AttnRows r{rows, 2};
    std::vector<float> y(size_t(2 * C), 0.0f), y_ref(y.size()), att(size_t(2 * s.NH * s.T), 0.0f),
        att_ref(att.size());
    ops().attention_rows_forward(k_cpu, y.data(), att.data(), qkv.data(), qkv.data() + C,
                                 qkv.data() + 2 * C, ld, s, mask, d, r);
    attention_rows_forward(y_ref.data(), att_ref.data(), qkv.data(), qkv.data() + C,
                           qkv.data() + 2 * C, ld, s, mask, d, r);
    expect_same("attention rows", y, y_ref);
    EXPECT_TRUE(ops().rows_supported());
}

// The strided copy the heads use for token 0 of every sample and for the
// columns of (N, 2) logits.
TEST(NnOpsCpu, BackendCopy2dMovesStridedRowsAndNothingElse) {
    std::vector<float> src(24), dst(12, -1.0f);
    for (size_t i = 0; i < src.size(); ++i) src[i] = float(i);
    // Rows of 2 floats every 6 in src, packed every 3 in dst.
    cpu_backend().copy_2d(dst.data(), 3 * sizeof(float), src.data() + 1, 6 * sizeof(float),
                          2 * sizeof(float), 4);
    const std::vector<float> want = {1, 2, -1, 7, 8, -1, 13, 14, -1, 19, 20, -1};
    EXPECT_EQ(dst, want);
}

TEST(NnOpsCpu, RefusesActivationsTheCpuDoesNotKeep) {
    const OpCtx bf16_acts{&cpu_backend(), DType::bf16};
    std::vector<float> x(8, 1.0f), y(8);
    try {
        ops().residual_forward(bf16_acts, y.data(), x.data(), x.data(), 8);
        FAIL() << "bf16 activations accepted on the CPU";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("residual_forward"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
    }
    EXPECT_THROW(ops().layer_norm_forward(bf16_acts, y.data(), y.data(), y.data(), x.data(),
                                          x.data(), x.data(), 1, 8, 1e-5),
                 Error);
}

}  // namespace
}  // namespace loom
