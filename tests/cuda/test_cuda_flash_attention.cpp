// Fused (flash) attention against the CPU reference: out, dq, dk, dv against
// attention_forward/attention_backward, lse against a log-sum-exp computed on
// the host in double, on odd and tile-straddling shapes (T = 1, 7, 64, 129,
// 300; every compiled head size), causal and not, key padding that leaves
// every row a key, attention dropout (with tensor-parallel head and sample
// offsets), q/k/v as views of one packed (B*T, 3C) buffer and as separate
// buffers whose rows are not 16-byte aligned. Also: bitwise run-to-run
// determinism, the precondition check, and rows without any key.
#include <cmath>
#include <limits>

#include "cuda_test_util.h"
#include "ops/attention.h"
#include "ops/cuda/entries_cuda.h"

namespace loom::test {
namespace {

template <typename T>
class CudaFlashAttention : public CudaTypedOpTest<T> {};
TYPED_TEST_SUITE(CudaFlashAttention, DeviceTypes, TypeNames);

class CudaFlashAttentionHost : public CudaOpTest {};

struct FlashCase {
    int64_t B, T, NH, HS;
    bool causal;
    bool padding;  // some keys padded, key 0 of every sample kept
    float drop_p;
    int64_t head_offset, NH_total, sample_offset;
    bool separate;  // three buffers with ld = C + 1 (rows not 16-byte aligned), else packed ld = 3C
};

constexpr FlashCase k_cases[] = {
    {1, 1, 1, 32, false, false, 0.0f, 0, 0, 0, false},
    {3, 1, 2, 64, true, false, 0.5f, 0, 0, 0, false},
    {2, 7, 2, 32, true, false, 0.0f, 0, 0, 0, false},
    {2, 7, 3, 64, false, true, 0.2f, 1, 5, 3, false},
    {1, 64, 2, 64, true, true, 0.0f, 0, 0, 0, false},
    {2, 64, 1, 128, false, false, 0.1f, 0, 0, 0, false},
    {2, 129, 2, 32, false, true, 0.0f, 0, 0, 0, false},
    {1, 129, 2, 128, true, true, 0.1f, 2, 4, 2, false},
    {2, 300, 2, 64, true, false, 0.0f, 0, 0, 0, false},
    {1, 300, 2, 128, false, true, 0.3f, 0, 0, 0, false},
    {2, 300, 1, 32, true, true, 0.1f, 0, 0, 0, false},
    {2, 65, 2, 64, true, true, 0.1f, 0, 0, 0, true},
    {1, 70, 2, 16, true, false, 0.0f, 0, 0, 0, false},
    {1, 70, 2, 80, false, true, 0.1f, 0, 0, 0, false},
    {2, 33, 1, 96, true, true, 0.0f, 0, 0, 0, true},
};

std::string describe(const FlashCase& c) {
    return "B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) +
           " NH=" + std::to_string(c.NH) + " HS=" + std::to_string(c.HS) +
           (c.causal ? " causal" : "") + (c.padding ? " padding" : "") +
           " p=" + std::to_string(c.drop_p) + (c.separate ? " separate" : " packed");
}

// The inputs of one case, already rounded to the device type.
struct FlashInputs {
    int64_t C, ld;
    std::vector<float> qkv;  // packed (B*T, 3C), or three (B*T, ld) buffers back to back
    size_t off[3];           // q, k, v offsets into qkv
    std::vector<float> dout;
    std::vector<int64_t> pad;  // (B, T) or empty
    std::vector<int64_t> key_start;  // (B, T) packed documents (AttnMask::key_start) or empty
    AttnShape shape;
    DropoutSpec drop;
};

template <typename T>
FlashInputs make_inputs(const FlashCase& c, uint32_t seed) {
    FlashInputs in;
    in.C = c.NH * c.HS;
    in.ld = c.separate ? in.C + 1 : 3 * in.C;
    const size_t rows = size_t(c.B * c.T);
    const size_t one = rows * size_t(in.ld);
    in.qkv = round_all<T>(random_vec(c.separate ? 3 * one : one, seed, -2.0f, 2.0f));
    for (int w = 0; w < 3; ++w) in.off[w] = size_t(w) * (c.separate ? one : size_t(in.C));
    in.dout = round_all<T>(random_vec(rows * size_t(in.C), seed + 1));
    if (c.padding) {
        in.pad.assign(rows, 1);
        for (int64_t b = 0; b < c.B; ++b)
            for (int64_t t = 1; t < c.T; ++t)
                if (t >= c.T - 1 - b || (t + b) % 5 == 3) in.pad[size_t(b * c.T + t)] = 0;
    }
    in.shape = AttnShape{c.B, c.T, c.NH, c.HS, c.head_offset, c.NH_total};
    in.drop.p = c.drop_p;
    in.drop.stream = PhiloxStream(99, 7, (2u << 8) | 5u);
    in.drop.sample_offset = c.sample_offset;
    return in;
}

struct AttnResult {
    std::vector<float> out, lse, dqkv;
};

AttnResult run_cpu(const FlashInputs& in, bool causal) {
    const AttnShape& s = in.shape;
    const size_t att_n = size_t(s.B * s.NH * s.T * s.T);
    AttnMask mask{in.pad.empty() ? nullptr : in.pad.data(), causal, -1,
                  in.key_start.empty() ? nullptr : in.key_start.data()};
    AttnResult r;
    r.out.assign(size_t(s.B * s.T * in.C), 0.0f);
    r.dqkv.assign(in.qkv.size(), 0.0f);
    std::vector<float> att(att_n), scratch(att_n);
    const float* x = in.qkv.data();
    float* dx = r.dqkv.data();
    attention_forward<float>(r.out.data(), att.data(), x + in.off[0], x + in.off[1], x + in.off[2],
                             in.ld, s, mask, in.drop);
    attention_backward<float>(dx + in.off[0], dx + in.off[1], dx + in.off[2], scratch.data(),
                              in.dout.data(), att.data(), x + in.off[0], x + in.off[1],
                              x + in.off[2], in.ld, s, mask, in.drop);
    return r;
}

template <typename T>
AttnResult run_flash(const FlashInputs& in, bool causal, const OpCtx& g) {
    const AttnShape& s = in.shape;
    auto gqkv = upload<T>(in.qkv), gdout = upload<T>(in.dout);
    auto gpad = upload_raw<int64_t>(in.pad);
    auto gstart = upload_raw<int64_t>(in.key_start);
    AttnMask mask{in.pad.empty() ? nullptr : gpad->get(), causal, -1,
                  in.key_start.empty() ? nullptr : gstart->get()};
    DeviceBuffer<T> gout(size_t(s.B * s.T * in.C)), gdqkv(in.qkv.size());
    DeviceBuffer<float> glse(size_t(s.B * s.NH * s.T));
    const T* x = gqkv->get();
    T* dx = gdqkv.get();
    g.nn().fused_attention_forward(g, g.act, gout.get(), glse.get(), x + in.off[0], x + in.off[1],
                                   x + in.off[2], in.ld, s, mask, in.drop);
    g.nn().fused_attention_backward(g, g.act, dx + in.off[0], dx + in.off[1], dx + in.off[2],
                                    gdout->get(), gout.get(), glse.get(), x + in.off[0],
                                    x + in.off[1], x + in.off[2], in.ld, s, mask, in.drop);
    return {download(gout), download(glse), download(gdqkv)};
}

// log sum_j exp(q_i . k_j / sqrt(HS)) over the visible keys, in double; -inf
// for a row without any.
std::vector<float> host_lse(const FlashInputs& in, bool causal) {
    const AttnShape& s = in.shape;
    std::vector<float> lse(size_t(s.B * s.NH * s.T));
    const double scale = 1.0 / std::sqrt(double(s.HS));
    std::vector<double> sc;
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.NH; ++h)
            for (int64_t i = 0; i < s.T; ++i) {
                sc.clear();
                const float* q = in.qkv.data() + in.off[0] + (b * s.T + i) * in.ld + h * s.HS;
                for (int64_t j = 0; j < s.T; ++j) {
                    if (causal && j > i) continue;
                    if (!in.key_start.empty() && j < in.key_start[size_t(b * s.T + i)]) continue;
                    if (!in.pad.empty() && in.pad[size_t(b * s.T + j)] == 0) continue;
                    const float* k = in.qkv.data() + in.off[1] + (b * s.T + j) * in.ld + h * s.HS;
                    double d = 0;
                    for (int64_t e = 0; e < s.HS; ++e) d += double(q[e]) * double(k[e]);
                    sc.push_back(d * scale);
                }
                double mx = -std::numeric_limits<double>::infinity();
                for (double x : sc) mx = std::max(mx, x);
                double sum = 0;
                for (double x : sc) sum += std::exp(x - mx);
                lse[size_t((b * s.NH + h) * s.T + i)] =
                    sc.empty() ? -std::numeric_limits<float>::infinity()
                               : float(mx + std::log(sum));
            }
    return lse;
}

TYPED_TEST(CudaFlashAttention, ForwardBackwardMatchCpu) {
    using T = TypeParam;
    uint32_t seed = 11;
    for (const FlashCase& c : k_cases) {
        const std::string tag = describe(c);
        ASSERT_TRUE(cuda::fused_attention_supported(AttnShape{c.B, c.T, c.NH, c.HS})) << tag;
        const FlashInputs in = make_inputs<T>(c, seed);
        seed += 3;
        ASSERT_TRUE(attention_every_row_has_a_key(in.pad.empty() ? nullptr : in.pad.data(), c.B,
                                                  c.T, c.causal))
            << tag;
        const AttnResult want = run_cpu(in, c.causal);
        const AttnResult got = run_flash<T>(in, c.causal, this->template gpu<T>());
        EXPECT_TRUE(all_close(tag + " out", got.out, want.out, tol_for<T>(2e-5, 1e-4)));
        // The scores are fp32 sums of the same rounded inputs for every T.
        EXPECT_TRUE(all_close(tag + " lse", got.lse, host_lse(in, c.causal), Tol{2e-4, 1e-4}));
        EXPECT_TRUE(all_close(tag + " dq/dk/dv", got.dqkv, want.dqkv, tol_for<T>(5e-5, 1e-3)));
    }
}

// Packed documents (AttnMask::key_start): each query sees its own document
// only, with padding at the end of a row, dropout and tile-straddling
// documents; causal (the decoders) and not.
TYPED_TEST(CudaFlashAttention, DocumentBoundsMatchCpu) {
    using T = TypeParam;
    constexpr FlashCase doc_cases[] = {
        {2, 40, 2, 32, true, true, 0.0f, 0, 0, 0, false},
        {2, 150, 2, 64, true, false, 0.1f, 0, 0, 0, false},
        {1, 70, 2, 128, false, false, 0.0f, 0, 0, 0, true},
    };
    uint32_t seed = 71;
    for (const FlashCase& c : doc_cases) {
        const std::string tag = describe(c) + " documents";
        FlashInputs in = make_inputs<T>(c, seed);
        seed += 3;
        // Documents of 1, 9, 17, ... tokens (the lengths grow by 8, sample b
        // starting one further), a row's last 3 tokens padding of their own.
        in.key_start.assign(size_t(c.B * c.T), 0);
        if (c.padding) in.pad.assign(size_t(c.B * c.T), 1);
        for (int64_t b = 0; b < c.B; ++b) {
            int64_t start = 0, len = 1 + b;
            for (int64_t t = 0; t < c.T; ++t) {
                if (t - start == len || (c.padding && t == c.T - 3)) {
                    start = t;
                    len += 8;
                }
                in.key_start[size_t(b * c.T + t)] = start;
                if (c.padding && t >= c.T - 3) in.pad[size_t(b * c.T + t)] = t == c.T - 3;
            }
        }
        ASSERT_TRUE(attention_every_row_has_a_key(in.pad.empty() ? nullptr : in.pad.data(), c.B,
                                                  c.T, c.causal, in.key_start.data()))
            << tag;
        const AttnResult want = run_cpu(in, c.causal);
        const AttnResult got = run_flash<T>(in, c.causal, this->template gpu<T>());
        EXPECT_TRUE(all_close(tag + " out", got.out, want.out, tol_for<T>(2e-5, 1e-4)));
        EXPECT_TRUE(all_close(tag + " lse", got.lse, host_lse(in, c.causal), Tol{2e-4, 1e-4}));
        EXPECT_TRUE(all_close(tag + " dq/dk/dv", got.dqkv, want.dqkv, tol_for<T>(5e-5, 1e-3)));
        // Without the bounds the results differ: the comparison can fail.
        FlashInputs mixed = in;
        mixed.key_start.clear();
        EXPECT_FALSE(all_close(tag + " mixed",
                               run_flash<T>(mixed, c.causal, this->template gpu<T>()).out, want.out,
                               tol_for<T>(2e-5, 1e-4)));
    }
}

TYPED_TEST(CudaFlashAttention, DeterministicRunToRun) {
    using T = TypeParam;
    const FlashCase c{2, 300, 2, 64, true, true, 0.1f, 1, 3, 5, false};
    const FlashInputs in = make_inputs<T>(c, 7);
    const AttnResult a = run_flash<T>(in, c.causal, this->template gpu<T>());
    const AttnResult b = run_flash<T>(in, c.causal, this->template gpu<T>());
    EXPECT_TRUE(bit_equal("out", a.out, b.out));
    EXPECT_TRUE(bit_equal("lse", a.lse, b.lse));
    EXPECT_TRUE(bit_equal("dq/dk/dv", a.dqkv, b.dqkv));
}

// Outside the precondition (the caller takes the unfused path there): a row
// without any visible key comes out as zeros with lse = -inf and sends no
// gradient, and the other samples are unaffected.
TYPED_TEST(CudaFlashAttention, RowsWithoutKeysGiveZerosNotNaN) {
    using T = TypeParam;
    const FlashCase c{3, 70, 2, 32, true, true, 0.1f, 0, 0, 0, false};
    FlashInputs in = make_inputs<T>(c, 5);
    for (int64_t t = 0; t < c.T; ++t) in.pad[size_t(1 * c.T + t)] = 0;  // sample 1: all padding
    for (int64_t t = 0; t < 3; ++t) in.pad[size_t(2 * c.T + t)] = 0;    // sample 2: left padding
    ASSERT_FALSE(attention_every_row_has_a_key(in.pad.data(), c.B, c.T, c.causal));
    const AttnResult got = run_flash<T>(in, c.causal, this->template gpu<T>());
    const AttnResult want = run_cpu(in, c.causal);
    const int64_t C = in.C;
    // Sample 0 is untouched by the others' padding.
    const auto rows = [&](const std::vector<float>& v, int64_t b, int64_t width) {
        return std::vector<float>(v.begin() + b * c.T * width, v.begin() + (b + 1) * c.T * width);
    };
    EXPECT_TRUE(all_close("sample 0 out", rows(got.out, 0, C), rows(want.out, 0, C),
                          tol_for<T>(2e-5, 1e-4)));
    EXPECT_TRUE(all_close("sample 0 dq/dk/dv", rows(got.dqkv, 0, 3 * C), rows(want.dqkv, 0, 3 * C),
                          tol_for<T>(5e-5, 1e-3)));
    for (int64_t b = 1; b < c.B; ++b)
        for (int64_t h = 0; h < c.NH; ++h)
            for (int64_t i = 0; i < c.T; ++i) {
                const bool keyless = b == 1 || i < 3;
                const float lse = got.lse[size_t((b * c.NH + h) * c.T + i)];
                if (keyless) {
                    EXPECT_TRUE(std::isinf(lse) && lse < 0)
                        << "b=" << b << " h=" << h << " i=" << i;
                    for (int64_t e = 0; e < c.HS; ++e)
                        ASSERT_EQ(got.out[size_t((b * c.T + i) * C + h * c.HS + e)], 0.0f)
                            << "b=" << b << " h=" << h << " i=" << i;
                } else {
                    EXPECT_TRUE(std::isfinite(lse)) << "b=" << b << " h=" << h << " i=" << i;
                }
            }
    for (size_t e = 0; e < got.dqkv.size(); ++e) ASSERT_TRUE(std::isfinite(got.dqkv[e])) << e;
    // Sample 1 has no visible key anywhere: no gradient to its q, k or v.
    for (float x : rows(got.dqkv, 1, 3 * C)) ASSERT_EQ(x, 0.0f);
}

TEST_F(CudaFlashAttentionHost, SupportedHeadSizes) {
    for (int64_t hs : {16, 32, 64, 80, 96, 128})
        EXPECT_TRUE(cuda::fused_attention_supported(AttnShape{2, 10, 3, hs})) << hs;
    for (int64_t hs : {1, 8, 24, 48, 100, 129, 256})
        EXPECT_FALSE(cuda::fused_attention_supported(AttnShape{2, 10, 3, hs})) << hs;
}

TEST_F(CudaFlashAttentionHost, EveryRowHasAKey) {
    const int64_t B = 2, T = 5;
    EXPECT_TRUE(attention_every_row_has_a_key(nullptr, B, T, false));
    EXPECT_TRUE(attention_every_row_has_a_key(nullptr, B, T, true));
    const std::vector<int64_t> right = {1, 1, 1, 0, 0, 1, 1, 1, 1, 0};
    EXPECT_TRUE(attention_every_row_has_a_key(right.data(), B, T, false));
    EXPECT_TRUE(attention_every_row_has_a_key(right.data(), B, T, true));
    // Left padding: query 0 sees only key 0, which is padding.
    const std::vector<int64_t> left = {1, 1, 1, 1, 1, 0, 0, 1, 1, 1};
    EXPECT_TRUE(attention_every_row_has_a_key(left.data(), B, T, false));
    EXPECT_FALSE(attention_every_row_has_a_key(left.data(), B, T, true));
    // A sample of nothing but padding.
    const std::vector<int64_t> empty = {1, 1, 1, 1, 1, 0, 0, 0, 0, 0};
    EXPECT_FALSE(attention_every_row_has_a_key(empty.data(), B, T, false));
    EXPECT_FALSE(attention_every_row_has_a_key(empty.data(), B, T, true));
    // Interior holes leave every row a key.
    const std::vector<int64_t> holes = {1, 0, 1, 0, 1, 1, 1, 0, 0, 1};
    EXPECT_TRUE(attention_every_row_has_a_key(holes.data(), B, T, true));
}

}  // namespace
}  // namespace loom::test
