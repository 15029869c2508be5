// bf16 attention (attention_forward_bf16 / attention_backward_bf16), checked two ways:
//   - against fp64 arithmetic on exactly the operands the kernel gives its GEMMs:
//     q, k, v and dout rounded to bf16, and the probabilities after dropout and
//     dS rounded from the kernel's own fp32 values (att, and scratch on return).
//     Rounding those from an fp64 reference instead would flip a rare element
//     to the neighbouring bf16 value and hide real errors behind a loose bound;
//     the fp32 values themselves are checked against fp64 separately. What is
//     left is fp32 accumulation, so the tolerances are the fp32 ones (a missed
//     rounding would show as ~1e-3);
//   - against the fp32 kernel on the unrounded inputs, within bf16 precision.
// Masks and dropout are on throughout: causal and not, a right-padded, a
// left-padded (rows with no visible key under causal) and an unpadded sample.
#include <cmath>
#include <string>

#include "core/dtype.h"
#include "ops/attention.h"
#include "ops_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

double bf16_rounded(float x) {
    return double(bf16_to_f32(f32_to_bf16(x)));
}

std::vector<double> bf16_rounded(const std::vector<float>& x) {
    std::vector<double> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_rounded(x[i]);
    return r;
}

// ||got - want|| / ||want||
double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        den += double(want[i]) * want[i];
    }
    return std::sqrt(num / den);
}

struct Case {
    AttnShape s;
    int64_t C, ld;
    std::vector<float> qkv;   // (B, T, 3C) packed, as SelfAttention feeds it
    std::vector<float> dout;  // (B, T, C)
    std::vector<int64_t> pad;
    DropoutSpec drop;
    const float* q() const { return qkv.data(); }
    const float* k() const { return qkv.data() + C; }
    const float* v() const { return qkv.data() + 2 * C; }
    size_t row(int64_t b, int64_t t) const { return size_t((b * s.T + t) * ld); }
    // q (0), k (1) or v (2) columns of a packed (B, T, 3C) buffer.
    std::vector<float> part(const std::vector<float>& packed, int64_t which) const {
        std::vector<float> x;
        for (int64_t r = 0; r < s.B * s.T; ++r)
            for (int64_t e = 0; e < C; ++e) x.push_back(packed[size_t(r * ld + which * C + e)]);
        return x;
    }
    // The kernel's dropout multipliers of head h of sample b, (T, T).
    std::vector<float> mult(int64_t b, int64_t h) const {
        const int64_t nh_total = s.NH_total > 0 ? s.NH_total : s.NH;
        const uint64_t base =
            (uint64_t(drop.sample_offset + b) * uint64_t(nh_total) + uint64_t(s.head_offset + h)) *
            uint64_t(s.T * s.T);
        std::vector<float> m(size_t(s.T * s.T));
        dropout_multipliers(m.data(), drop, base, s.T * s.T);
        return m;
    }
};

// B = 3 samples: right-padded, left-padded by 3, unpadded. Head offset and
// sample offset place the dropout draws as a tensor-parallel rank would.
Case make_case(int64_t T, int64_t NH, int64_t HS, uint64_t seed) {
    Case c{{3, T, NH, HS, 1, NH + 2}, NH * HS, 3 * NH * HS, {}, {}, {}, {}};
    c.qkv = to_f32(randn(c.s.B * T * c.ld, seed));
    c.dout = to_f32(randn(c.s.B * T * c.C, seed + 1));
    c.pad.assign(size_t(3 * T), 1);
    for (int64_t t = T - T / 3; t < T; ++t) c.pad[size_t(t)] = 0;
    for (int64_t t = 0; t < 3; ++t) c.pad[size_t(T + t)] = 0;
    c.drop.p = 0.2f;
    c.drop.stream = PhiloxStream(7, 8, 9);
    c.drop.sample_offset = 5;
    return c;
}

struct Results {
    std::vector<float> out, att, dqkv, scratch;
};

template <typename Fwd, typename Bwd>
Results run(const Case& c, bool causal, Fwd fwd, Bwd bwd) {
    const AttnShape& s = c.s;
    const AttnMask mask{c.pad.data(), causal};
    Results r;
    r.out.resize(size_t(s.B * s.T * c.C));
    r.att.resize(size_t(s.B * s.NH * s.T * s.T));
    r.dqkv.resize(c.qkv.size());
    r.scratch.resize(r.att.size());
    fwd(r.out.data(), r.att.data(), c.q(), c.k(), c.v(), c.ld, s, mask, c.drop);
    float* dq = r.dqkv.data();
    bwd(dq, dq + c.C, dq + 2 * c.C, r.scratch.data(), c.dout.data(), r.att.data(), c.q(), c.k(),
        c.v(), c.ld, s, mask, c.drop);
    return r;
}

Results run_bf16(const Case& c, bool causal) {
    return run(c, causal, attention_forward_bf16, attention_backward_bf16);
}

Results run_f32(const Case& c, bool causal) {
    return run(c, causal, attention_forward<float>, attention_backward<float>);
}

// Every quantity the bf16 kernel produces, recomputed in fp64 from the rounded
// operands (see the file comment); compared element by element.
void check_against_rounded_reference(const Case& c, bool causal) {
    const AttnShape& s = c.s;
    const int64_t T = s.T, HS = s.HS, C = c.C, TT = T * T;
    const Results r = run_bf16(c, causal);
    const std::vector<double> qkv = bf16_rounded(c.qkv), dy = bf16_rounded(c.dout);
    const double scale = 1.0 / std::sqrt(double(HS));  // HS a power of 4: exact in fp32 too

    // att: the fp64 kernel on the rounded q, k (v and dropout do not enter).
    std::vector<double> out64(r.out.size()), att64(r.att.size());
    attention_forward<double>(out64.data(), att64.data(), qkv.data(), qkv.data() + C,
                              qkv.data() + 2 * C, c.ld, s, AttnMask{c.pad.data(), causal},
                              DropoutSpec{});
    EXPECT_TRUE(all_close("att", r.att, att64, tol::f32_fwd));

    std::vector<double> want_out(r.out.size()), want_ds(r.att.size()), want_dqkv(r.dqkv.size());
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.NH; ++h) {
            const std::vector<float> m = c.mult(b, h);
            const float* a = r.att.data() + (b * s.NH + h) * TT;
            const float* ds = r.scratch.data() + (b * s.NH + h) * TT;
            // P after dropout as the kernel forms it (fp32 product), then rounded.
            std::vector<double> p(static_cast<size_t>(TT)), dsr(static_cast<size_t>(TT));
            for (int64_t e = 0; e < TT; ++e) {
                p[size_t(e)] = bf16_rounded(m[size_t(e)] * a[e]);
                dsr[size_t(e)] = bf16_rounded(ds[e]);
            }
            const int64_t col = h * HS;
            for (int64_t i = 0; i < T; ++i) {
                // out = P @ v
                for (int64_t e = 0; e < HS; ++e) {
                    double o = 0;
                    for (int64_t j = 0; j < T; ++j)
                        o += p[size_t(i * T + j)] * qkv[c.row(b, j) + size_t(2 * C + col + e)];
                    want_out[size_t((b * T + i) * C + col + e)] = o;
                }
                // dS = P (dP - <P, dP>) with dP = mult * (dout @ v^T); zero for a
                // row with no visible key.
                const int64_t limit = causal ? i + 1 : T;
                bool any = false;
                for (int64_t j = 0; j < limit; ++j) any = any || c.pad[size_t(b * T + j)] != 0;
                std::vector<double> dp(static_cast<size_t>(T));
                double dot = 0;
                for (int64_t j = 0; j < T; ++j) {
                    double d = 0;
                    for (int64_t e = 0; e < HS; ++e)
                        d += dy[size_t((b * T + i) * C + col + e)] *
                             qkv[c.row(b, j) + size_t(2 * C + col + e)];
                    dp[size_t(j)] = d * double(m[size_t(i * T + j)]);
                    dot += double(a[i * T + j]) * dp[size_t(j)];
                }
                for (int64_t j = 0; j < T; ++j)
                    want_ds[size_t((b * s.NH + h) * TT + i * T + j)] =
                        any ? double(a[i * T + j]) * (dp[size_t(j)] - dot) : 0.0;
            }
            for (int64_t i = 0; i < T; ++i)
                for (int64_t e = 0; e < HS; ++e) {
                    double dq = 0, dk = 0, dv = 0;
                    for (int64_t j = 0; j < T; ++j) {
                        dq += dsr[size_t(i * T + j)] * qkv[c.row(b, j) + size_t(C + col + e)];
                        dk += dsr[size_t(j * T + i)] * qkv[c.row(b, j) + size_t(col + e)];
                        dv += p[size_t(j * T + i)] * dy[size_t((b * T + j) * C + col + e)];
                    }
                    want_dqkv[c.row(b, i) + size_t(col + e)] = scale * dq;
                    want_dqkv[c.row(b, i) + size_t(C + col + e)] = scale * dk;
                    want_dqkv[c.row(b, i) + size_t(2 * C + col + e)] = dv;
                }
        }
    EXPECT_TRUE(all_close("out", r.out, want_out, tol::f32_fwd));
    EXPECT_TRUE(all_close("dS (scratch)", r.scratch, want_ds, tol::f32_bwd));
    EXPECT_TRUE(all_close("dq, dk, dv", r.dqkv, want_dqkv, tol::f32_bwd));
}

}  // namespace

// T = 13: one thread runs every head; T = 40: heads spread over the threads.
TEST(AttentionBf16, EqualsFp64OfRoundedOperands) {
    for (int64_t T : {13, 40})
        for (bool causal : {false, true}) {
            SCOPED_TRACE("T " + std::to_string(T) + (causal ? " causal" : ""));
            check_against_rounded_reference(make_case(T, 3, 16, uint64_t(T)), causal);
        }
}

TEST(AttentionBf16, WithinBf16OfFp32Kernel) {
    for (bool causal : {false, true}) {
        SCOPED_TRACE(causal ? "causal" : "bidirectional");
        const Case c = make_case(40, 3, 16, 21);
        const Results lo = run_bf16(c, causal), hi = run_f32(c, causal);
        // Each GEMM operand carries bf16's relative rounding of up to 2^-9 (0.2%);
        // the errors of a few roundings add up to well under 1% in norm, where
        // the fp32 kernel agrees with fp64 to ~1e-6.
        EXPECT_LT(rel_l2(lo.att, hi.att), 1e-2);
        EXPECT_LT(rel_l2(lo.out, hi.out), 1e-2);
        for (int64_t which = 0; which < 3; ++which)
            EXPECT_LT(rel_l2(c.part(lo.dqkv, which), c.part(hi.dqkv, which)), 1e-2)
                << "gradient of "
                << "qkv"[which];
        // And not equal: the variant really rounds.
        EXPECT_GT(rel_l2(lo.out, hi.out), 1e-4);
    }
}
