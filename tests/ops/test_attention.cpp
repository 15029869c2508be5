// Attention semantics: HF's additive-minimum mask arithmetic as the reference,
// fully padded rows, causal masking, tensor-parallel head splits and packed rows.
#include <limits>

#include "ops/attention.h"
#include "ops_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

// HF eager attention written out in double: scores / sqrt(HS); causal positions
// replaced by float32's lowest (GPT-2's torch.where), then (1 - mask) * lowest
// added (get_extended_attention_mask); softmax; probabilities @ v.
void hf_reference(double* out, double* att, const double* q, const double* k, const double* v,
                  int64_t ld, const AttnShape& s, const int64_t* pad, bool causal) {
    const double lowest = double(std::numeric_limits<float>::lowest());
    const int64_t C = s.NH * s.HS;
    std::vector<double> w(static_cast<size_t>(s.T));
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.NH; ++h)
            for (int64_t i = 0; i < s.T; ++i) {
                double mx = -INFINITY;
                for (int64_t j = 0; j < s.T; ++j) {
                    double d = 0;
                    for (int64_t e = 0; e < s.HS; ++e)
                        d += q[(b * s.T + i) * ld + h * s.HS + e] *
                             k[(b * s.T + j) * ld + h * s.HS + e];
                    d /= std::sqrt(double(s.HS));
                    if (causal && j > i) d = lowest;
                    if (pad) d += (1.0 - double(pad[b * s.T + j])) * lowest;
                    w[size_t(j)] = d;
                    mx = std::max(mx, d);
                }
                double sum = 0;
                for (double& x : w) sum += (x = std::exp(x - mx));
                double* a = att + ((b * s.NH + h) * s.T + i) * s.T;
                for (int64_t j = 0; j < s.T; ++j) a[j] = w[size_t(j)] / sum;
                for (int64_t e = 0; e < s.HS; ++e) {
                    double o = 0;
                    for (int64_t j = 0; j < s.T; ++j)
                        o += a[j] * v[(b * s.T + j) * ld + h * s.HS + e];
                    out[(b * s.T + i) * C + h * s.HS + e] = o;
                }
            }
}

struct Inputs {
    AttnShape s;
    int64_t C, ld;
    std::vector<double> qkv;  // (B, T, 3C) packed
    const double* q() const { return qkv.data(); }
    const double* k() const { return qkv.data() + C; }
    const double* v() const { return qkv.data() + 2 * C; }
};

Inputs make_inputs(int64_t B, int64_t T, int64_t NH, int64_t HS, uint64_t seed) {
    Inputs in{{B, T, NH, HS}, NH * HS, 3 * NH * HS, {}};
    in.qkv = round_f32(randn(B * T * in.ld, seed));
    return in;
}

}  // namespace

TEST(Attention, MatchesHfMaskArithmetic) {
    const Inputs in = make_inputs(3, 9, 2, 8, 1);
    const AttnShape& s = in.s;
    // Right-padded, left-padded (fully masked first rows under causal), no padding.
    const std::vector<int64_t> pad = {1, 1, 1, 1, 1, 1, 0, 0, 0, /**/ 0, 0, 0, 1, 1, 1, 1, 1, 1,
                                      /**/ 1, 1, 1, 1, 1, 1, 1, 1, 1};
    for (bool causal : {false, true}) {
        const AttnMask mask{pad.data(), causal};
        std::vector<double> want_out(size_t(s.B * s.T * in.C)), want_att(size_t(s.B * s.NH * s.T * s.T));
        hf_reference(want_out.data(), want_att.data(), in.q(), in.k(), in.v(), in.ld, s,
                     pad.data(), causal);
        std::vector<double> out(want_out.size()), att(want_att.size());
        attention_forward<double>(out.data(), att.data(), in.q(), in.k(), in.v(), in.ld, s, mask,
                                  DropoutSpec{});
        const std::string tag = causal ? " causal" : "";
        EXPECT_TRUE(all_close("f64 att" + tag, att, want_att, Tol{1e-14, 1e-12}));
        EXPECT_TRUE(all_close("f64 out" + tag, out, want_out, Tol{1e-13, 1e-12}));
        std::vector<float> qkv = to_f32(in.qkv), outf(out.size()), attf(att.size());
        attention_forward<float>(outf.data(), attf.data(), qkv.data(), qkv.data() + in.C,
                                 qkv.data() + 2 * in.C, in.ld, s, mask, DropoutSpec{});
        EXPECT_TRUE(all_close("f32 att" + tag, attf, want_att, tol::f32_fwd));
        EXPECT_TRUE(all_close("f32 out" + tag, outf, want_out, tol::f32_fwd));
    }
}

TEST(Attention, FullyPaddedRowIsUniform) {
    const Inputs in = make_inputs(2, 6, 2, 4, 2);
    const AttnShape& s = in.s;
    const std::vector<int64_t> pad = {0, 0, 0, 0, 0, 0, /**/ 0, 0, 1, 1, 1, 1};
    for (bool causal : {false, true}) {
        std::vector<double> out(size_t(s.B * s.T * in.C)), att(size_t(s.B * s.NH * s.T * s.T));
        attention_forward<double>(out.data(), att.data(), in.q(), in.k(), in.v(), in.ld, s,
                                  AttnMask{pad.data(), causal}, DropoutSpec{});
        for (int64_t h = 0; h < s.NH; ++h)
            for (int64_t i = 0; i < s.T; ++i) {
                // Sample 0 sees no key: uniform over the causally allowed keys, and the
                // output is the mean of their values.
                const int64_t n = causal ? i + 1 : s.T;
                const double* a = att.data() + (h * s.T + i) * s.T;
                for (int64_t j = 0; j < s.T; ++j) EXPECT_EQ(a[j], j < n ? 1.0 / double(n) : 0.0);
                for (int64_t e = 0; e < s.HS; ++e) {
                    double mean_v = 0;
                    for (int64_t j = 0; j < n; ++j) mean_v += in.v()[j * in.ld + h * s.HS + e];
                    EXPECT_NEAR(out[size_t(i * in.C + h * s.HS + e)], mean_v / double(n), 1e-14);
                }
                // Sample 1 is left-padded: keys 0 and 1 always get exactly 0 weight
                // except in rows that see no real key (causal rows 0 and 1). Those are
                // uniform over keys 0..i and the real future keys 2..5, as HF's
                // replace-then-add mask arithmetic leaves them.
                const double* a1 = att.data() + ((s.NH + h) * s.T + i) * s.T;
                if (!causal || i >= 2) {
                    EXPECT_EQ(a1[0], 0.0);
                    EXPECT_EQ(a1[1], 0.0);
                } else {
                    const double u = 1.0 / double(i + 1 + 4);
                    for (int64_t j = 0; j < s.T; ++j) EXPECT_EQ(a1[j], j <= i || j >= 2 ? u : 0.0);
                }
            }
    }
}

TEST(Attention, CausalOutputIgnoresTheFuture) {
    Inputs in = make_inputs(2, 7, 3, 4, 3);
    const AttnShape& s = in.s;
    std::vector<double> out(size_t(s.B * s.T * in.C)), att(size_t(s.B * s.NH * s.T * s.T));
    attention_forward<double>(out.data(), att.data(), in.q(), in.k(), in.v(), in.ld, s,
                              AttnMask{nullptr, true}, DropoutSpec{});
    for (int64_t bh = 0; bh < s.B * s.NH; ++bh)
        for (int64_t i = 0; i < s.T; ++i)
            for (int64_t j = i + 1; j < s.T; ++j)
                EXPECT_EQ(att[size_t((bh * s.T + i) * s.T + j)], 0.0);
    // Change every q, k, v at positions >= 4: outputs at positions < 4 stay.
    Inputs changed = in;
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t t = 4; t < s.T; ++t)
            for (int64_t c = 0; c < in.ld; ++c) changed.qkv[size_t((b * s.T + t) * in.ld + c)] += 1.5;
    std::vector<double> out2(out.size()), att2(att.size());
    attention_forward<double>(out2.data(), att2.data(), changed.q(), changed.k(), changed.v(),
                              in.ld, s, AttnMask{nullptr, true}, DropoutSpec{});
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t t = 0; t < s.T; ++t)
            for (int64_t c = 0; c < in.C; ++c) {
                const size_t idx = size_t((b * s.T + t) * in.C + c);
                if (t < 4)
                    EXPECT_EQ(out2[idx], out[idx]);
                else
                    EXPECT_NE(out2[idx], out[idx]);
            }
}

TEST(Attention, TensorParallelHeadSplitMatchesFull) {
    // Heads [0, 2) and [2, 4) computed separately, each with its global head
    // offset: identical outputs, probabilities, dropout masks and gradients.
    const Inputs in = make_inputs(2, 11, 4, 8, 4);
    const AttnShape& s = in.s;
    const std::vector<int64_t> pad = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, /**/ 1, 1, 1, 1, 1, 1, 1,
                                      1, 1, 1, 1};
    const AttnMask mask{pad.data(), true};
    DropoutSpec drop;
    drop.p = 0.25f;
    drop.stream = PhiloxStream(11, 12, 13);
    drop.sample_offset = 6;
    std::vector<float> qkv = to_f32(in.qkv), dout = to_f32(randn(s.B * s.T * in.C, 5));
    const float* q = qkv.data();
    const float* k = q + in.C;
    const float* v = q + 2 * in.C;
    const int64_t TT = s.T * s.T;
    std::vector<float> out(size_t(s.B * s.T * in.C)), att(size_t(s.B * s.NH * TT));
    attention_forward<float>(out.data(), att.data(), q, k, v, in.ld, s, mask, drop);
    std::vector<float> dqkv(qkv.size()), scratch(att.size());
    attention_backward<float>(dqkv.data(), dqkv.data() + in.C, dqkv.data() + 2 * in.C,
                              scratch.data(), dout.data(), att.data(), q, k, v, in.ld, s, mask,
                              drop);

    const int64_t NHl = 2, Cl = NHl * s.HS;
    for (int64_t part = 0; part < 2; ++part) {
        AttnShape sl = s;
        sl.NH = NHl;
        sl.head_offset = part * NHl;
        sl.NH_total = s.NH;
        const int64_t col = part * Cl;  // first column of these heads in q, k, v and out
        std::vector<float> out_l(size_t(s.B * s.T * Cl)), att_l(size_t(s.B * NHl * TT));
        attention_forward<float>(out_l.data(), att_l.data(), q + col, k + col, v + col, in.ld, sl,
                                 mask, drop);
        std::vector<float> dout_l(out_l.size()), dqkv_l(qkv.size(), 0.0f),
            scratch_l(att_l.size());
        for (int64_t r = 0; r < s.B * s.T; ++r)
            for (int64_t c = 0; c < Cl; ++c) {
                EXPECT_EQ(out_l[size_t(r * Cl + c)], out[size_t(r * in.C + col + c)]);
                dout_l[size_t(r * Cl + c)] = dout[size_t(r * in.C + col + c)];
            }
        for (int64_t b = 0; b < s.B; ++b)
            for (int64_t h = 0; h < NHl; ++h)
                for (int64_t e = 0; e < TT; ++e)
                    EXPECT_EQ(att_l[size_t((b * NHl + h) * TT + e)],
                              att[size_t((b * s.NH + part * NHl + h) * TT + e)]);
        attention_backward<float>(dqkv_l.data() + col, dqkv_l.data() + in.C + col,
                                  dqkv_l.data() + 2 * in.C + col, scratch_l.data(), dout_l.data(),
                                  att_l.data(), q + col, k + col, v + col, in.ld, sl, mask, drop);
        for (int64_t r = 0; r < s.B * s.T; ++r)
            for (int64_t which = 0; which < 3; ++which)
                for (int64_t c = 0; c < Cl; ++c) {
                    const size_t idx = size_t(r * in.ld + which * in.C + col + c);
                    EXPECT_EQ(dqkv_l[idx], dqkv[idx]) << "row " << r << " operand " << which;
                }
    }
}

TEST(Attention, DropoutMaskKeyedByGlobalSampleHeadQueryKey) {
    const Inputs in = make_inputs(2, 5, 2, 4, 6);
    const AttnShape& s = in.s;
    DropoutSpec drop;
    drop.p = 0.5f;
    drop.stream = PhiloxStream(1, 2, 3);
    drop.sample_offset = 9;
    // With v = one-hot rows, out = dropout(P) @ v exposes the dropped probabilities.
    std::vector<double> qkv = in.qkv;
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t t = 0; t < s.T; ++t)
            for (int64_t c = 0; c < in.C; ++c)
                qkv[size_t((b * s.T + t) * in.ld + 2 * in.C + c)] = (c % s.HS) == t ? 1.0 : 0.0;
    std::vector<double> out(size_t(s.B * s.T * in.C)), att(size_t(s.B * s.NH * s.T * s.T));
    attention_forward<double>(out.data(), att.data(), qkv.data(), qkv.data() + in.C,
                              qkv.data() + 2 * in.C, in.ld, s, AttnMask{}, drop);
    int64_t dropped = 0;
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.NH; ++h)
            for (int64_t i = 0; i < s.T; ++i)
                for (int64_t j = 0; j < s.HS && j < s.T; ++j) {
                    const uint64_t e =
                        (uint64_t(9 + b) * uint64_t(s.NH) + uint64_t(h)) * uint64_t(s.T * s.T) +
                        uint64_t(i * s.T + j);
                    const double p = att[size_t(((b * s.NH + h) * s.T + i) * s.T + j)];
                    const double want = drop.keep(e) ? p * dropout_scale<double>(drop) : 0.0;
                    EXPECT_NEAR(out[size_t((b * s.T + i) * in.C + h * s.HS + j)], want, 1e-15);
                    dropped += !drop.keep(e);
                }
    EXPECT_GT(dropped, 0);
}
