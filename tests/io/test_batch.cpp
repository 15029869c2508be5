// Batch loading: I32 is widened to I64, the tensors are writable copies, and
// optional keys are found or not.
#include "io/batch.h"
#include "io/safetensors.h"
#include "io_test_util.h"

namespace loom {
namespace {

class BatchTest : public test::TempDirTest {};

TEST_F(BatchTest, I32IsWidenedAndTensorsAreWritable) {
    Tensor ids = Tensor::empty(DType::i32, {2, 3});
    for (int i = 0; i < 6; ++i) ids.data<int32_t>()[i] = i == 5 ? -100 : 7 * i;
    Tensor mask = Tensor::empty(DType::i64, {2, 3});
    for (int i = 0; i < 6; ++i) mask.data<int64_t>()[i] = i < 4;
    const std::string p = path("b.safetensors");
    safetensors_write(p, {{"input_ids", ids}, {"attention_mask", mask}});

    Batch b = load_batch(p);
    EXPECT_EQ(b.path, p);
    EXPECT_EQ(b.keys(), (std::vector<std::string>{"attention_mask", "input_ids"}));
    const Tensor& got = b.require("input_ids");
    EXPECT_EQ(got.dtype, DType::i64);
    EXPECT_EQ(got.shape, Shape({2, 3}));
    for (int i = 0; i < 6; ++i) EXPECT_EQ(got.data<int64_t>()[i], i == 5 ? -100 : 7 * i);
    EXPECT_EQ(b.require("attention_mask").data<int64_t>()[3], 1);
    EXPECT_EQ(b.require("attention_mask").data<int64_t>()[4], 0);

    // Owned memory: writing must not fault (the file mapping is read-only).
    b.require("attention_mask").data<int64_t>()[0] = 5;
    EXPECT_EQ(b.find("attention_mask")->data<int64_t>()[0], 5);
    EXPECT_TRUE(b.contains("input_ids"));
    EXPECT_FALSE(b.find("token_type_ids").has_value());
}

TEST_F(BatchTest, MissingFileNamesThePath) {
    std::string msg = test::error_of([&] { load_batch(path("nope.safetensors")); });
    EXPECT_TRUE(test::contains(msg, path("nope.safetensors")));
}

TEST_F(BatchTest, EmptyBatchListsNoKeys) {
    const std::string p = path("empty.safetensors");
    safetensors_write(p, {});
    Batch b = load_batch(p);
    std::string msg = test::error_of([&] { b.require("input_ids"); });
    EXPECT_TRUE(test::contains(msg, "keys present: none"));
}

}  // namespace
}  // namespace loom
