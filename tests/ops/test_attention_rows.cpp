// Attention at a subset of query rows against the whole-sequence kernels: the
// output rows equal attention_forward's at those rows, and backward equals the
// whole backward fed a gradient that is zero outside those rows - with causal
// masking, key padding (one sample fully padded after a few tokens), dropout,
// a tensor-parallel head offset, and samples with no query row at all.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/check.h"
#include "ops/attention.h"
#include "ops/attention_rows.h"
#include "ops_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

struct Case {
    bool causal, padded, dropout;
};

double max_abs_diff(const float* a, const float* b, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) worst = std::max(worst, double(std::fabs(a[i] - b[i])));
    return worst;
}

TEST(AttentionRows, EqualTheWholeSequenceKernelsAtThoseRows) {
    const int64_t B = 4, T = 11, NH = 3, HS = 5, C = NH * HS, ld = 3 * C, N = B * T;
    // Sample 0: token 0 only; 1: nothing; 2: several rows incl. padded ones; 3: all.
    std::vector<int64_t> rows{0};
    for (int64_t t : {1, 4, 8, 10}) rows.push_back(2 * T + t);
    for (int64_t t = 0; t < T; ++t) rows.push_back(3 * T + t);
    const int64_t M = int64_t(rows.size());
    std::vector<int64_t> pad(size_t(N), 1);
    for (int64_t t = 7; t < T; ++t) pad[size_t(2 * T + t)] = 0;
    for (int64_t t = 1; t < T; ++t) pad[size_t(T + t)] = 0;
    const std::vector<float> qkv = to_f32(randn(N * ld, 3));
    const std::vector<float> dfull_src = to_f32(randn(N * C, 4));

    for (const Case cs :
         {Case{false, false, false}, Case{false, true, false}, Case{true, true, false},
          Case{false, true, true}, Case{true, false, true}}) {
        SCOPED_TRACE(testing::Message() << "causal " << cs.causal << " padded " << cs.padded
                                        << " dropout " << cs.dropout);
        // Heads 1..3 of 5: the dropout elements depend on the global head.
        const AttnShape s{B, T, NH, HS, /*head_offset=*/1, /*NH_total=*/5};
        const AttnMask mask{cs.padded ? pad.data() : nullptr, cs.causal};
        DropoutSpec drop;
        if (cs.dropout) {
            drop.p = 0.3f;
            drop.stream = PhiloxStream{9, 2, 7};
            drop.sample_offset = 6;
        }
        const float *q = qkv.data(), *k = q + C, *v = q + 2 * C;

        std::vector<float> out(size_t(N * C)), att(size_t(B * NH * T * T));
        attention_forward(out.data(), att.data(), q, k, v, ld, s, mask, drop);
        std::vector<float> out_r(size_t(M * C)), att_r(size_t(M * NH * T));
        const AttnRows r{rows.data(), M};
        attention_rows_forward(out_r.data(), att_r.data(), q, k, v, ld, s, mask, drop, r);
        for (int64_t i = 0; i < M; ++i)
            EXPECT_LT(max_abs_diff(out_r.data() + i * C, out.data() + rows[size_t(i)] * C, C), 1e-6)
                << "row " << rows[size_t(i)];

        // Backward: the whole kernel with dout zero outside the rows.
        std::vector<float> dout(size_t(N * C), 0.0f), dout_r(size_t(M * C));
        for (int64_t i = 0; i < M; ++i)
            for (int64_t c = 0; c < C; ++c) {
                const float g = dfull_src[size_t(rows[size_t(i)] * C + c)];
                dout[size_t(rows[size_t(i)] * C + c)] = g;
                dout_r[size_t(i * C + c)] = g;
            }
        std::vector<float> dqkv(size_t(N * ld), 0.0f), scratch(att.size());
        attention_backward(dqkv.data(), dqkv.data() + C, dqkv.data() + 2 * C, scratch.data(),
                           dout.data(), att.data(), q, k, v, ld, s, mask, drop);
        // Poisoned: every element of the rows kernel's output must be written.
        std::vector<float> dqkv_r(size_t(N * ld), NAN), scratch_r(att_r.size());
        attention_rows_backward(dqkv_r.data(), dqkv_r.data() + C, dqkv_r.data() + 2 * C,
                                scratch_r.data(), dout_r.data(), att_r.data(), q, k, v, ld, s, mask,
                                drop, r);
        for (int64_t n = 0; n < N; ++n)
            for (int64_t c = 0; c < 3 * C; ++c) {
                const float want = dqkv[size_t(n * ld + c)], got = dqkv_r[size_t(n * ld + c)];
                ASSERT_TRUE(std::isfinite(got)) << "row " << n << " column " << c;
                EXPECT_NEAR(got, want, 1e-5 + 1e-5 * std::fabs(want))
                    << "row " << n << " column " << c;
            }
    }
}

TEST(AttentionRows, RejectsRowsThatAreNotIncreasing) {
    const int64_t B = 1, T = 4, NH = 1, HS = 2, C = 2, ld = 6;
    std::vector<float> qkv(size_t(B * T * ld), 0.5f), out(8), att(8);
    const std::vector<int64_t> rows{2, 1};
    try {
        attention_rows_forward(out.data(), att.data(), qkv.data(), qkv.data() + C,
                               qkv.data() + 2 * C, ld, AttnShape{B, T, NH, HS}, AttnMask{},
                               DropoutSpec{}, AttnRows{rows.data(), 2});
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("not increasing"), std::string::npos) << e.what();
    }
}

}  // namespace
