#include <gtest/gtest.h>

#include "core/philox.h"
#include "core/tensor.h"

using namespace loom;

TEST(Tensor, SliceAndReshapeShareStorage) {
    Tensor t = Tensor::empty(DType::f32, {4, 3}, "t");
    for (int i = 0; i < 12; ++i) t.data<float>()[i] = float(i);
    Tensor s = t.slice0(1, 3);
    EXPECT_EQ(s.shape, Shape({2, 3}));
    EXPECT_EQ(s.data<float>()[0], 3.0f);
    Tensor r = s.reshape({6});
    r.data<float>()[5] = -1.0f;
    EXPECT_EQ(t.data<float>()[8], -1.0f);
}

TEST(Tensor, WrongDtypeAccessThrows) {
    Tensor t = Tensor::empty(DType::i64, {2}, "ids");
    EXPECT_THROW(t.data<float>(), Error);
}

TEST(Tensor, Bf16RoundTripRoundsToNearestEven) {
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
    // 1 + 2^-8 is exactly halfway between two bf16 values; ties go to even (1.0).
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.00390625f)), 1.0f);
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.01171875f)), 1.015625f);
}

TEST(Tensor, F16RoundTrip) {
    for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f})
        EXPECT_EQ(f16_to_f32(f32_to_f16(v)), v) << v;
}

TEST(Philox, KnownAnswer) {
    // Random123 known-answer test for philox4x32-10, counter and key all 0.
    auto r = philox4x32({0, 0, 0, 0}, {0, 0});
    EXPECT_EQ(r[0], 0x6627e8d5u);
    EXPECT_EQ(r[1], 0xe169c58du);
    EXPECT_EQ(r[2], 0xbc57ac4cu);
    EXPECT_EQ(r[3], 0x9b00dbd8u);
}

TEST(Philox, StreamIsIndexedNotSequential) {
    PhiloxStream s(1234, 7, 3);
    float a = s.uniform(1000003);
    PhiloxStream t(1234, 7, 3);
    EXPECT_EQ(a, t.uniform(1000003));
    EXPECT_NE(a, PhiloxStream(1234, 8, 3).uniform(1000003));
    double mean = 0;
    for (int i = 0; i < 100000; ++i) mean += s.uniform(uint64_t(i));
    EXPECT_NEAR(mean / 100000, 0.5, 0.01);
}
