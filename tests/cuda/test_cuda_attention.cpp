// The CUDA table's attention forward and backward entries against the CPU: separate and packed
// (GPT-2 c_attn) q/k/v, padding and causal masks, an all-padding sample, left padding under a
// causal mask (rows with no visible key), attention dropout with tensor-parallel head offsets, odd
// head sizes and T = 1.
#include "cuda_test_util.h"
#include "ops/attention.h"

namespace loom::test {
namespace {

template <typename T>
class CudaAttention : public CudaTypedOpTest<T> {};
TYPED_TEST_SUITE(CudaAttention, DeviceTypes, TypeNames);

struct AttnCase {
    int64_t B, T, NH, HS;
    bool packed;  // q, k, v interleaved in one (B, T, 3C) buffer
    bool causal;
    bool padding;  // last positions of each sample padded; sample 1 fully padded
    float drop_p;
    int64_t head_offset, NH_total, sample_offset;
};

constexpr AttnCase k_cases[] = {
    {1, 1, 1, 1, false, false, false, 0.0f, 0, 0, 0},
    {2, 5, 3, 4, false, false, false, 0.0f, 0, 0, 0},
    {2, 7, 2, 7, true, true, false, 0.0f, 0, 0, 0},
    {3, 9, 2, 8, false, false, true, 0.0f, 0, 0, 0},
    {3, 8, 2, 16, true, true, true, 0.0f, 0, 0, 0},  // left padding + causal: HF's uniform rows
    {2, 11, 2, 8, false, false, true, 0.2f, 1, 4, 3},
    {2, 6, 3, 5, true, true, false, 0.5f, 0, 0, 0},
    {2, 128, 4, 64, true, true, false, 0.1f, 0, 0, 0},
};

std::string describe(const AttnCase& c) {
    return "B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) +
           " NH=" + std::to_string(c.NH) + " HS=" + std::to_string(c.HS) +
           (c.packed ? " packed" : "") + (c.causal ? " causal" : "") +
           (c.padding ? " padding" : "") + " p=" + std::to_string(c.drop_p);
}

TYPED_TEST(CudaAttention, ForwardBackwardMatchCpu) {
    using T = TypeParam;
    for (const AttnCase& c : k_cases) {
        const std::string tag = describe(c);
        const int64_t C = c.NH * c.HS;
        const int64_t ld = c.packed ? 3 * C : C;
        const size_t qkv_n = size_t(c.B * c.T * ld);
        // Packed: one buffer, q/k/v at +0/+C/+2C. Separate: three buffers.
        auto qkv = round_all<T>(random_vec(c.packed ? qkv_n : 3 * qkv_n, 1, -2.0f, 2.0f));
        auto off = [&](int which) { return size_t(which) * (c.packed ? size_t(C) : qkv_n); };
        auto dout = round_all<T>(random_vec(size_t(c.B * c.T * C), 2));
        std::vector<int64_t> pad;
        if (c.padding) {
            pad.assign(size_t(c.B * c.T), 1);
            for (int64_t b = 0; b < c.B; ++b)
                for (int64_t t = 0; t < c.T; ++t)
                    if (b == 1 || (b == 2 && t < 2) || (b != 2 && t >= c.T - 1 - b))
                        pad[size_t(b * c.T + t)] = 0;
        }
        AttnShape s{c.B, c.T, c.NH, c.HS, c.head_offset, c.NH_total};
        DropoutSpec drop;
        drop.p = c.drop_p;
        drop.stream = PhiloxStream(99, 7, (2u << 8) | 5u);
        drop.sample_offset = c.sample_offset;

        // CPU reference.
        AttnMask cmask{c.padding ? pad.data() : nullptr, c.causal};
        const size_t att_n = size_t(c.B * c.NH * c.T * c.T);
        std::vector<float> out(size_t(c.B * c.T * C)), att(att_n), scratch(att_n);
        std::vector<float> dqkv(qkv.size(), 0.0f);
        attention_forward<float>(out.data(), att.data(), qkv.data() + off(0), qkv.data() + off(1),
                                 qkv.data() + off(2), ld, s, cmask, drop);
        attention_backward<float>(dqkv.data() + off(0), dqkv.data() + off(1), dqkv.data() + off(2),
                                  scratch.data(), dout.data(), att.data(), qkv.data() + off(0),
                                  qkv.data() + off(1), qkv.data() + off(2), ld, s, cmask, drop);

        // GPU.
        auto gqkv = upload<T>(qkv), gdout = upload<T>(dout);
        auto gpad = upload_raw<int64_t>(pad);
        AttnMask gmask{c.padding ? gpad->get() : nullptr, c.causal};
        DeviceBuffer<T> gout(out.size()), gatt(att_n), gscratch(att_n), gdqkv(qkv.size());
        T* base = gqkv->get();
        const OpCtx g = this->template gpu<T>();
        g.nn().attention_forward(g, g.act, gout.get(), gatt.get(), base + off(0), base + off(1),
                                 base + off(2), ld, s, gmask, drop);
        EXPECT_TRUE(all_close(tag + " att", download(gatt), att, tol_for<T>(1e-6, 1e-4)));
        EXPECT_TRUE(all_close(tag + " out", download(gout), out, tol_for<T>(2e-5, 1e-4)));
        T* dbase = gdqkv.get();
        g.nn().attention_backward(g, g.act, dbase + off(0), dbase + off(1), dbase + off(2),
                                  gscratch.get(), gdout->get(), gatt.get(), base + off(0),
                                  base + off(1), base + off(2), ld, s, gmask, drop);
        EXPECT_TRUE(all_close(tag + " dq/dk/dv", download(gdqkv), dqkv, tol_for<T>(5e-5, 1e-3)));
    }
}

// Packed documents (AttnMask::key_start): each query sees its own document
// only, combined with padding (a document whose first tokens are padding has
// rows with no visible key: the uniform rule within the document), dropout
// and GPT-2's packed q/k/v.
TYPED_TEST(CudaAttention, DocumentBoundsMatchCpu) {
    using T = TypeParam;
    const int64_t B = 2, Tn = 13, NH = 2, HS = 8, C = NH * HS, ld = 3 * C;
    // Row 0: documents of 4, 5 and 4 tokens; row 1: 6 and 7, the second one's
    // first two tokens padded, and its last.
    const std::vector<int64_t> lens[2] = {{4, 5, 4}, {6, 7}};
    std::vector<int64_t> start(size_t(B * Tn)), pad(size_t(B * Tn), 1);
    for (int64_t b = 0; b < B; ++b) {
        int64_t t0 = 0;
        for (int64_t n : lens[b]) {
            for (int64_t t = t0; t < t0 + n; ++t) start[size_t(b * Tn + t)] = t0;
            t0 += n;
        }
    }
    pad[size_t(Tn + 6)] = pad[size_t(Tn + 7)] = pad[size_t(2 * Tn - 1)] = 0;
    auto qkv = round_all<T>(random_vec(size_t(B * Tn * ld), 5, -2.0f, 2.0f));
    auto dout = round_all<T>(random_vec(size_t(B * Tn * C), 6));
    auto gqkv = upload<T>(qkv), gdout = upload<T>(dout);
    auto gpad = upload_raw<int64_t>(pad), gstart = upload_raw<int64_t>(start);
    const AttnShape s{B, Tn, NH, HS};
    for (float p : {0.0f, 0.3f}) {
        const std::string tag = "documents p=" + std::to_string(p);
        DropoutSpec drop;
        drop.p = p;
        drop.stream = PhiloxStream(99, 7, (2u << 8) | 5u);
        const AttnMask cmask{pad.data(), true, -1, start.data()};
        const size_t att_n = size_t(B * NH * Tn * Tn);
        std::vector<float> out(size_t(B * Tn * C)), att(att_n), scratch(att_n),
            dqkv(qkv.size(), 0.0f);
        attention_forward<float>(out.data(), att.data(), qkv.data(), qkv.data() + C,
                                 qkv.data() + 2 * C, ld, s, cmask, drop);
        attention_backward<float>(dqkv.data(), dqkv.data() + C, dqkv.data() + 2 * C, scratch.data(),
                                  dout.data(), att.data(), qkv.data(), qkv.data() + C,
                                  qkv.data() + 2 * C, ld, s, cmask, drop);
        const AttnMask gmask{gpad->get(), true, -1, gstart->get()};
        DeviceBuffer<T> gout(out.size()), gatt(att_n), gscratch(att_n), gdqkv(qkv.size());
        const T* x = gqkv->get();
        const OpCtx g = this->template gpu<T>();
        g.nn().attention_forward(g, g.act, gout.get(), gatt.get(), x, x + C, x + 2 * C, ld, s,
                                 gmask, drop);
        EXPECT_TRUE(all_close(tag + " att", download(gatt), att, tol_for<T>(1e-6, 1e-4)));
        EXPECT_TRUE(all_close(tag + " out", download(gout), out, tol_for<T>(2e-5, 1e-4)));
        T* dx = gdqkv.get();
        g.nn().attention_backward(g, g.act, dx, dx + C, dx + 2 * C, gscratch.get(), gdout->get(),
                                  gatt.get(), x, x + C, x + 2 * C, ld, s, gmask, drop);
        EXPECT_TRUE(all_close(tag + " dq/dk/dv", download(gdqkv), dqkv, tol_for<T>(5e-5, 1e-3)));
        // A probability across a document boundary would show here.
        const std::vector<float> got_att = download(gatt);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < NH; ++h)
                for (int64_t i = 0; i < Tn; ++i)
                    for (int64_t j = 0; j < start[size_t(b * Tn + i)]; ++j)
                        ASSERT_EQ(got_att[size_t(((b * NH + h) * Tn + i) * Tn + j)], 0.0f)
                            << tag << " b=" << b << " h=" << h << " i=" << i << " j=" << j;
    }
}

}  // namespace
}  // namespace loom::test
