// Finite-difference gradient checks for attention in fp64: padding mask, causal
// mask, both (with a left-padded sample whose first rows see no key), GPT-2's
// packed q|k|v rows (ld = 3C), and probability dropout (its mask is a pure
// function of the element, so the perturbed forwards all draw the same one).
#include "ops/attention.h"
#include "ops_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

struct AttnCase {
    const char* name;
    int64_t B = 2, T = 5, NH = 3, HS = 4;
    bool packed = false, causal = false;
    std::vector<int64_t> key_padding{};  // (B, T) or empty
    int64_t window = -1;                 // sliding window (causal), -1: none
    float p = 0.0f;
};

void check_attention(const AttnCase& c) {
    const int64_t C = c.NH * c.HS, ld = c.packed ? 3 * C : C;
    const AttnShape s{c.B, c.T, c.NH, c.HS};
    AttnMask mask;
    mask.causal = c.causal;
    mask.window = c.window;
    if (!c.key_padding.empty()) mask.key_padding = c.key_padding.data();
    DropoutSpec drop;
    drop.p = c.p;
    drop.stream = PhiloxStream(99, 3, 7);
    drop.sample_offset = 5;

    // One buffer per operand, or one packed (B, T, 3C) buffer.
    const int64_t rows = c.B * c.T;
    std::vector<double> bufs[3];
    if (c.packed) {
        bufs[0] = randn(rows * ld, 1);
    } else {
        for (int i = 0; i < 3; ++i) bufs[i] = randn(rows * ld, uint64_t(1 + i));
    }
    auto operand = [&](int i) { return c.packed ? bufs[0].data() + i * C : bufs[i].data(); };

    const std::vector<double> w = randn(rows * C, 10);
    std::vector<double> out(size_t(rows * C)), att(size_t(c.B * c.NH * c.T * c.T));
    auto loss = [&] {
        attention_forward<double>(out.data(), att.data(), operand(0), operand(1), operand(2), ld, s,
                                  mask, drop);
        return dot(w, out.data());
    };
    loss();
    std::vector<double> dbufs[3];
    for (int i = 0; i < (c.packed ? 1 : 3); ++i) dbufs[i].assign(bufs[i].size(), std::nan(""));
    auto doperand = [&](int i) { return c.packed ? dbufs[0].data() + i * C : dbufs[i].data(); };
    std::vector<double> scratch(att.size());
    attention_backward<double>(doperand(0), doperand(1), doperand(2), scratch.data(), w.data(),
                               att.data(), operand(0), operand(1), operand(2), ld, s, mask, drop);
    const char* names[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < (c.packed ? 1 : 3); ++i) {
        const std::vector<double> num = numeric_grad(loss, bufs[i].data(), int64_t(bufs[i].size()));
        EXPECT_TRUE(all_close(std::string(c.name) + " " + (c.packed ? "dqkv" : names[i]), dbufs[i],
                              num, tol::fd));
    }
}

}  // namespace

TEST(GradCheckAttention, NoMask) {
    check_attention({.name = "no mask"});
}

TEST(GradCheckAttention, PaddingMaskWithFullyPaddedSample) {
    check_attention({.name = "padding",
                     .B = 3,
                     .key_padding = {1, 1, 1, 0, 0, /**/ 1, 1, 1, 1, 1, /**/ 0, 0, 0, 0, 0}});
}

TEST(GradCheckAttention, CausalMask) {
    check_attention({.name = "causal", .causal = true});
}

TEST(GradCheckAttention, SlidingWindowWithPadding) {
    check_attention({.name = "window",
                     .T = 6,
                     .causal = true,
                     .key_padding = {1, 1, 1, 1, 1, 1, /**/ 1, 1, 1, 1, 0, 0},
                     .window = 2});
}

TEST(GradCheckAttention, CausalAndPaddingWithLeftPadding) {
    // Sample 1 is left-padded: its rows 0 and 1 see no real key.
    check_attention({.name = "causal+padding",
                     .causal = true,
                     .key_padding = {1, 1, 1, 0, 0, /**/ 0, 0, 1, 1, 1}});
}

TEST(GradCheckAttention, PackedQkvRows) {
    check_attention({.name = "packed", .packed = true, .causal = true});
}

TEST(GradCheckAttention, ProbabilityDropout) {
    check_attention({.name = "dropout", .key_padding = {1, 1, 1, 1, 0, 1, 1, 1, 1, 1}, .p = 0.3f});
}

TEST(GradCheckAttention, PackedCausalPaddingDropout) {
    check_attention({.name = "everything",
                     .packed = true,
                     .causal = true,
                     .key_padding = {1, 1, 1, 1, 0, 0, 1, 1, 1, 1},
                     .p = 0.2f});
}
