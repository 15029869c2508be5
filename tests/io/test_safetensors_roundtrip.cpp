// Writer -> reader round trips: every dtype, scalars, zero-size tensors and
// metadata come back bit for bit, and the file layout is what the format and
// torch's writer promise (padded header, name order, contiguous data).
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "io/safetensors.h"
#include "io_test_util.h"

namespace loom {
namespace {

using test::contains;
using test::error_of;

class SafetensorsRoundTrip : public test::TempDirTest {};

// A tensor whose bytes are a deterministic pattern, with special values for
// the float types so the round trip must preserve NaN, inf and -0 bit for bit.
Tensor patterned(DType dtype, Shape shape, uint8_t seed) {
    Tensor t = Tensor::empty(dtype, shape);
    auto* p = static_cast<uint8_t*>(t.raw());
    for (size_t i = 0; i < t.nbytes(); ++i) p[i] = uint8_t(seed + i * 37);
    if (dtype == DType::f32 && t.numel() >= 4) {
        float* f = t.data<float>();
        f[0] = std::numeric_limits<float>::quiet_NaN();
        f[1] = -std::numeric_limits<float>::infinity();
        f[2] = -0.0f;
        f[3] = std::numeric_limits<float>::denorm_min();
    }
    return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() &&
           (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

TEST_F(SafetensorsRoundTrip, EveryDtypeScalarAndZeroSizeComeBackBitForBit) {
    std::map<std::string, Tensor> in;
    uint8_t seed = 1;
    for (DType t :
         {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64, DType::f64, DType::u8}) {
        std::string n(dtype_name(t));
        in["t." + n] = patterned(t, {3, 5}, seed++);   // odd sizes: 2- and 1-byte types
        in["scalar." + n] = patterned(t, {}, seed++);  // shape []
        in["empty." + n] = patterned(t, {0}, seed++);  // zero elements
        in["empty3d." + n] = patterned(t, {2, 0, 7}, seed++);
        in["rank5." + n] = patterned(t, {1, 2, 1, 3, 2}, seed++);
    }
    const std::map<std::string, std::string> meta = {{"format", "pt"},
                                                     {"note", "caf\xc3\xa9, \"quoted\"\n"}};
    const std::string p = path("all.safetensors");
    safetensors_write(p, in, meta);

    SafetensorsFile f = SafetensorsFile::open(p);
    EXPECT_EQ(f.metadata(), meta);
    ASSERT_EQ(f.names().size(), in.size());
    for (const auto& [name, t] : in) {
        ASSERT_TRUE(f.contains(name)) << name;
        Tensor r = f.get(name);
        EXPECT_EQ(r.dtype, t.dtype) << name;
        EXPECT_EQ(r.shape, t.shape) << name << " " << r.shape.to_string();
        EXPECT_EQ(r.numel(), t.numel()) << name;
        EXPECT_TRUE(same_bytes(r, t)) << name;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(r.raw()) % dtype_size(r.dtype), 0u) << name;
    }
    // Typed access to the view reads the values, not only the bytes.
    Tensor f32 = f.get("t.f32", DType::f32, {3, 5});
    EXPECT_TRUE(std::isnan(f32.data<float>()[0]));
    EXPECT_EQ(f32.data<float>()[1], -std::numeric_limits<float>::infinity());
    EXPECT_TRUE(std::signbit(f32.data<float>()[2]));
    EXPECT_EQ(f32.data<float>()[3], std::numeric_limits<float>::denorm_min());
}

TEST_F(SafetensorsRoundTrip, LayoutIsPaddedSortedAndContiguous) {
    std::map<std::string, Tensor> in = {{"b", patterned(DType::f32, {3}, 1)},
                                        {"a", patterned(DType::u8, {5}, 2)},
                                        {"c", patterned(DType::i64, {2, 2}, 3)}};
    const std::string p = path("layout.safetensors");
    safetensors_write(p, in, {{"format", "pt"}});

    // Parse the raw bytes here, independently of the reader under test.
    const std::string bytes = test::read_all(p);
    ASSERT_GE(bytes.size(), 8u);
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    EXPECT_EQ(n % 8, 0u) << "header must be padded to a multiple of 8";
    const std::string header = bytes.substr(8, n);
    EXPECT_EQ(header.rfind("{\"__metadata__\":{\"format\":\"pt\"},\"a\":", 0), 0u) << header;
    EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}'));
    auto j = nlohmann::ordered_json::parse(header);
    std::vector<std::string> order;
    uint64_t expect_begin = 0;
    for (const auto& [name, e] : j.items()) {
        if (name == "__metadata__") continue;
        order.push_back(name);
        EXPECT_EQ(e["data_offsets"][0].get<uint64_t>(), expect_begin) << name;
        expect_begin = e["data_offsets"][1].get<uint64_t>();
    }
    EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ(8 + n + expect_begin, bytes.size()) << "data must end the file, without gaps";
    // The data bytes are the tensors' bytes in name order.
    std::string expect_data;
    for (const auto& [name, t] : in)
        expect_data.append(static_cast<const char*>(t.raw()), t.nbytes());
    EXPECT_EQ(bytes.substr(8 + n), expect_data);

    // The reader's file order is data order.
    SafetensorsFile f = SafetensorsFile::open(p);
    EXPECT_EQ(f.names(), order);
    EXPECT_EQ(f.data_bytes(), expect_begin);
}

TEST_F(SafetensorsRoundTrip, EmptyFileAndNoMetadata) {
    const std::string p = path("empty.safetensors");
    safetensors_write(p, {});
    SafetensorsFile f = SafetensorsFile::open(p);
    EXPECT_TRUE(f.names().empty());
    EXPECT_TRUE(f.metadata().empty());
    EXPECT_EQ(test::read_all(p).size() % 8, 0u);
}

TEST_F(SafetensorsRoundTrip, ViewOutlivesTheFileObject) {
    const std::string p = path("v.safetensors");
    Tensor w = patterned(DType::f32, {4, 4}, 9);
    safetensors_write(p, {{"w", w}});
    Tensor view;
    {
        SafetensorsFile f = SafetensorsFile::open(p);
        view = f.get("w");
    }
    EXPECT_TRUE(same_bytes(view, w));
    EXPECT_EQ(view.name, "w");
}

TEST_F(SafetensorsRoundTrip, OverwriteReplacesAndLeavesNoTemporaryFiles) {
    const std::string p = path("ckpt.safetensors");
    safetensors_write(p, {{"x", patterned(DType::f32, {8}, 1)}});
    Tensor y = patterned(DType::i32, {2}, 2);
    safetensors_write(p, {{"y", y}});
    SafetensorsFile f = SafetensorsFile::open(p);
    EXPECT_FALSE(f.contains("x"));
    EXPECT_TRUE(same_bytes(f.get("y"), y));
    int entries = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
        ++entries;
        EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
    }
    EXPECT_EQ(entries, 1);
}

TEST_F(SafetensorsRoundTrip, WriterRejectsBadInputWithoutTouchingTheOldFile) {
    const std::string p = path("keep.safetensors");
    Tensor good = patterned(DType::f32, {2}, 1);
    safetensors_write(p, {{"good", good}});
    const std::string before = test::read_all(p);

    std::string msg = error_of([&] { safetensors_write(p, {{"undefined", Tensor{}}}); });
    EXPECT_TRUE(contains(msg, p));
    EXPECT_TRUE(contains(msg, "'undefined'"));
    msg = error_of([&] { safetensors_write(p, {{"__metadata__", good}}); });
    EXPECT_TRUE(contains(msg, "reserved"));
    msg = error_of([&] { safetensors_write(p, {{"bad\xff", good}}); });
    EXPECT_TRUE(contains(msg, "UTF-8"));
    EXPECT_EQ(test::read_all(p), before);

    msg = error_of([&] { safetensors_write(path("no/such/dir/x.safetensors"), {{"g", good}}); });
    EXPECT_TRUE(contains(msg, "no/such/dir/x.safetensors"));
    EXPECT_TRUE(contains(msg, "No such file or directory"));
}

TEST_F(SafetensorsRoundTrip, GetChecksDtypeAndShapeAndSuggestsNames) {
    const std::string p = path("g.safetensors");
    safetensors_write(
        p, {{"encoder.layer.0.attention.self.query.weight", patterned(DType::f32, {4, 2}, 1)}});
    SafetensorsFile f = SafetensorsFile::open(p);
    std::string msg = error_of([&] {
        f.get("encoder.layer.0.attention.self.query.weight", DType::f32, {2, 4});
    });
    EXPECT_TRUE(contains(msg, p));
    EXPECT_TRUE(contains(msg,
                         "'encoder.layer.0.attention.self.query.weight' is F32 [4, 2], "
                         "expected F32 [2, 4]"));
    msg = error_of([&] {
        f.get("encoder.layer.0.attention.self.query.weight", DType::bf16, {4, 2});
    });
    EXPECT_TRUE(contains(msg, "expected BF16 [4, 2]"));

    msg = error_of([&] { f.get("encoder.layer.0.attention.self.querry.weight"); });
    EXPECT_TRUE(contains(msg, p));
    EXPECT_TRUE(contains(msg, "no tensor named 'encoder.layer.0.attention.self.querry.weight'"));
    EXPECT_TRUE(contains(msg, "did you mean 'encoder.layer.0.attention.self.query.weight'"));
    msg = error_of([&] { f.shape("pooler"); });
    EXPECT_TRUE(contains(msg, "'pooler'"));
    EXPECT_FALSE(contains(msg, "did you mean"));
}

TEST_F(SafetensorsRoundTrip, UnalignedDataIsCopiedToAlignedMemory) {
    // Legal but unusual: a 13-byte header puts the data at byte 21, so an F32
    // tensor there is misaligned; the reader must hand out an aligned copy.
    const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    const float vals[2] = {1.5f, -2.25f};
    std::string data(reinterpret_cast<const char*>(vals), 8);
    std::string image = test::safetensors_image(header, data);
    ASSERT_NE((8 + header.size()) % 4, 0u) << "test needs a misaligned data start";
    SafetensorsFile f = SafetensorsFile::open(write_bytes("u.safetensors", image));
    Tensor t = f.get("w");
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 4, 0u);
    EXPECT_EQ(t.data<float>()[0], 1.5f);
    EXPECT_EQ(t.data<float>()[1], -2.25f);
}

TEST_F(SafetensorsRoundTrip, GapsAndTrailingBytesAndUnknownFieldsAreAccepted) {
    // Only overlap is an error: a gap between tensors and an extra field in an
    // entry (other writers add them) still read correctly.
    const std::string header = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[4,6],"extra":1},)"
                               R"("z":{"dtype":"U8","shape":[0],"data_offsets":[8,8]}})";
    std::string image = test::safetensors_image(header, std::string("\0\0\0\0\x07\x09\0\0", 8));
    SafetensorsFile f = SafetensorsFile::open(write_bytes("gap.safetensors", image));
    Tensor a = f.get("a");
    EXPECT_EQ(a.data<uint8_t>()[0], 7);
    EXPECT_EQ(a.data<uint8_t>()[1], 9);
    EXPECT_EQ(f.get("z").numel(), 0);
}

}  // namespace
}  // namespace loom
