// Packed documents in attention (AttnMask::key_start) and rotary embeddings
// (rope_apply's positions): a packed row gives each document what it gets
// alone, in forward and backward, with padding and Mistral's sliding window.
#include <gtest/gtest.h>

#include <type_traits>
#include <vector>

#include "ops/attention.h"
#include "ops/rope.h"
#include "ops_test_util.h"

namespace loom::test {
namespace {

// A (B, T) batch of documents: lens[b] the lengths in row b, the rest padding.
struct Packing {
    int64_t B, T;
    std::vector<std::vector<int64_t>> lens;
    std::vector<int64_t> pad, key_start, positions;  // (B, T)
    Packing(int64_t b, int64_t t, std::vector<std::vector<int64_t>> l)
        : B(b), T(t), lens(std::move(l)) {
        for (int64_t r = 0; r < B; ++r) {
            int64_t t0 = 0;
            for (int64_t n : lens[size_t(r)]) {
                for (int64_t i = 0; i < n; ++i) {
                    pad.push_back(1);
                    key_start.push_back(t0);
                    positions.push_back(i);
                }
                t0 += n;
            }
            for (int64_t i = t0; i < T; ++i) {  // padding: a document of its own
                pad.push_back(0);
                key_start.push_back(t0);
                positions.push_back(i - t0);
            }
        }
    }
};

template <typename F>
std::vector<F> to(const std::vector<double>& v) {
    return std::vector<F>(v.begin(), v.end());
}

// Rows [t0, t0 + n) of sample b of a (B, T, width) buffer.
template <typename F>
std::vector<F> take_rows(const std::vector<F>& x, int64_t T, int64_t width, int64_t b, int64_t t0,
                         int64_t n) {
    const auto first = x.begin() + (b * T + t0) * width;
    return std::vector<F>(first, first + n * width);
}

template <typename F>
void check_packed_equals_separate(int64_t window, bool bf16) {
    const int64_t NH = 2, HS = 4, C = NH * HS, ld = 3 * C;
    const Packing p(2, 10, {{4, 3, 3}, {6, 2}});
    const int64_t B = p.B, T = p.T;
    const auto qkv = to<F>(randn(B * T * ld, 31)), dy = to<F>(randn(B * T * C, 32));
    const AttnShape s{B, T, NH, HS};
    const AttnMask mask{p.pad.data(), true, window, p.key_start.data()};
    std::vector<F> y(size_t(B * T * C)), att(size_t(B * NH * T * T)), scratch(att.size());
    std::vector<F> dqkv(size_t(B * T * ld));
    auto fwd = [&](F* out, F* a, const F* x, const AttnShape& sh, const AttnMask& m) {
        if constexpr (std::is_same_v<F, float>)
            if (bf16) return attention_forward_bf16(out, a, x, x + C, x + 2 * C, ld, sh, m, {});
        attention_forward<F>(out, a, x, x + C, x + 2 * C, ld, sh, m, DropoutSpec{});
    };
    auto bwd = [&](F* d, F* sc, const F* dout, const F* a, const F* x, const AttnShape& sh,
                   const AttnMask& m) {
        if constexpr (std::is_same_v<F, float>)
            if (bf16)
                return attention_backward_bf16(d, d + C, d + 2 * C, sc, dout, a, x, x + C,
                                               x + 2 * C, ld, sh, m, {});
        attention_backward<F>(d, d + C, d + 2 * C, sc, dout, a, x, x + C, x + 2 * C, ld, sh, m,
                              DropoutSpec{});
    };
    fwd(y.data(), att.data(), qkv.data(), s, mask);
    bwd(dqkv.data(), scratch.data(), dy.data(), att.data(), qkv.data(), s, mask);
    // Without the bound the same batch mixes documents: the test can fail.
    std::vector<F> y_mixed(y.size());
    fwd(y_mixed.data(), att.data(), qkv.data(), s, AttnMask{p.pad.data(), true, window});
    EXPECT_NE(y_mixed, y);

    const Tol tol = std::is_same_v<F, double> ? Tol{1e-12, 1e-12} : Tol{1e-6, 1e-5};
    for (int64_t b = 0; b < B; ++b) {
        int64_t t0 = 0;
        for (int64_t n : p.lens[size_t(b)]) {
            const auto x1 = take_rows(qkv, T, ld, b, t0, n), dy1 = take_rows(dy, T, C, b, t0, n);
            const AttnShape s1{1, n, NH, HS};
            std::vector<F> y1(size_t(n * C)), a1(size_t(NH * n * n)), sc1(a1.size());
            std::vector<F> d1(size_t(n * ld));
            fwd(y1.data(), a1.data(), x1.data(), s1, AttnMask{nullptr, true, window});
            bwd(d1.data(), sc1.data(), dy1.data(), a1.data(), x1.data(), s1,
                AttnMask{nullptr, true, window});
            const std::string at =
                "sample " + std::to_string(b) + " document at " + std::to_string(t0) + ": ";
            EXPECT_TRUE(
                all_close(at + "y", take_rows(y, T, C, b, t0, n).data(), y1.data(), n * C, tol));
            EXPECT_TRUE(all_close(at + "dqkv", take_rows(dqkv, T, ld, b, t0, n).data(), d1.data(),
                                  n * ld, tol));
            t0 += n;
        }
    }
}

TEST(AttentionDocuments, PackedRowsEqualEachDocumentAlone) {
    check_packed_equals_separate<double>(-1, false);
    check_packed_equals_separate<float>(-1, false);
}

TEST(AttentionDocuments, WithASlidingWindow) {
    check_packed_equals_separate<double>(2, false);
}

TEST(AttentionDocuments, Bf16Autocast) {
    check_packed_equals_separate<float>(-1, true);
}

// The fused kernels' precondition: each query needs an unpadded key in its
// own document.
TEST(AttentionDocuments, EveryRowHasAKeyLooksInsideTheDocument) {
    Packing p(1, 6, {{3, 3}});
    EXPECT_TRUE(attention_every_row_has_a_key(p.pad.data(), 1, 6, true, p.key_start.data()));
    p.pad[3] = 0;  // the second document's first token is padding: query 3 sees nothing
    EXPECT_TRUE(attention_every_row_has_a_key(p.pad.data(), 1, 6, true));
    EXPECT_FALSE(attention_every_row_has_a_key(p.pad.data(), 1, 6, true, p.key_start.data()));
}

TEST(AttentionDocuments, KeyStartAfterTheQueryIsRefused) {
    const int64_t T = 3, C = 4;
    const std::vector<int64_t> bad = {0, 2, 0};  // query 1 would start at key 2
    std::vector<float> x(size_t(T * 3 * C), 0.5f), y(size_t(T * C)), att(size_t(T * T));
    EXPECT_THROW(attention_forward<float>(y.data(), att.data(), x.data(), x.data() + C,
                                          x.data() + 2 * C, 3 * C, AttnShape{1, T, 1, C},
                                          AttnMask{nullptr, true, -1, bad.data()}, DropoutSpec{}),
                 std::exception);
}

// Rotary embeddings at per-token positions turn each document as if alone.
TEST(RopeDocuments, PositionsRestartPerDocument) {
    const int64_t heads = 2, d = 8, ld = heads * d;
    const Packing p(2, 7, {{3, 4}, {5}});
    const RopeSpec spec{1e4, 1.0};
    const auto x0 = to_f32(randn(p.B * p.T * ld, 41));
    auto x = x0;
    rope_apply(x.data(), ld, p.B, p.T, heads, d, spec, false, p.positions.data());
    for (int64_t b = 0; b < p.B; ++b) {
        int64_t t0 = 0;
        for (int64_t n : p.lens[size_t(b)]) {
            auto one = take_rows(x0, p.T, ld, b, t0, n);
            rope_apply(one.data(), ld, 1, n, heads, d, spec, false);
            EXPECT_EQ(take_rows(x, p.T, ld, b, t0, n), one) << "sample " << b << " at " << t0;
            t0 += n;
        }
    }
    // The inverse undoes it.
    rope_apply(x.data(), ld, p.B, p.T, heads, d, spec, true, p.positions.data());
    EXPECT_TRUE(all_close("rope round trip", x.data(), x0.data(), int64_t(x.size()), {1e-6, 1e-6}));
    std::vector<int64_t> out_of_range = p.positions;
    out_of_range[1] = p.T;
    EXPECT_THROW(rope_apply(x.data(), ld, p.B, p.T, heads, d, spec, false, out_of_range.data()),
                 std::exception);
}

}  // namespace
}  // namespace loom::test
