// Sharded safetensors (model.safetensors.index.json): written as
// save_pretrained splits them, read back as one file; an index from a repo
// is untrusted (shard names that are paths, tensors in the wrong shard or
// in two shards are refused, naming the index).
#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/safetensors.h"
#include "io_test_util.h"

namespace loom {
namespace {

using test::contains;
using test::error_of;

class SafetensorsIndex : public test::TempDirTest {
protected:
    static Tensor filled(int64_t n, float v) {
        Tensor t = Tensor::empty(DType::f32, Shape{n});
        for (int64_t i = 0; i < n; ++i) static_cast<float*>(t.raw())[i] = v + float(i);
        return t;
    }
    void write(const std::string& name, const std::string& text) { std::ofstream(path(name)) << text; }
};

TEST_F(SafetensorsIndex, SplitsInNameOrderAndReadsBack) {
    std::map<std::string, Tensor> t = {{"a", filled(100, 1)}, {"b", filled(100, 2)},
                                       {"c", filled(300, 3)}, {"d", filled(10, 4)}};
    // 400 bytes per shard: a+b (800 > 400 -> a alone), b, c alone (1200), d.
    const auto files = safetensors_write_sharded(dir_, t, 400);
    ASSERT_EQ(files.size(), 5u);
    EXPECT_EQ(files[0], "model-00001-of-00004.safetensors");
    EXPECT_EQ(files.back(), "model.safetensors.index.json");
    EXPECT_FALSE(std::filesystem::exists(path("model.safetensors")));
    EXPECT_EQ(safetensors_weights_in(dir_), path("model.safetensors.index.json"));
    const SafetensorsFile f = SafetensorsFile::open(path("model.safetensors.index.json"));
    for (const auto& [name, want] : t) {
        const Tensor got = f.get(name, DType::f32, want.shape);
        EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << name;
    }
    EXPECT_EQ(f.data_bytes(), size_t(510 * 4));
    // Everything fits: one model.safetensors, and the old index is gone.
    EXPECT_EQ(safetensors_write_sharded(dir_, t, 1u << 20), std::vector<std::string>{"model.safetensors"});
    EXPECT_FALSE(std::filesystem::exists(path("model.safetensors.index.json")));
}

TEST_F(SafetensorsIndex, UntrustedIndexesAreRefused) {
    safetensors_write(path("s1.safetensors"), {{"a", filled(4, 1)}});
    safetensors_write(path("s2.safetensors"), {{"a", filled(4, 1)}, {"b", filled(4, 2)}});
    for (const char* bad : {"../s1.safetensors", "/etc/passwd", "sub/s1.safetensors", ".."}) {
        write("i.index.json", std::string("{\"weight_map\": {\"a\": \"") + bad + "\"}}");
        EXPECT_TRUE(contains(error_of([&] { SafetensorsFile::open(path("i.index.json")); }),
                             "is not a file name next to the index"))
            << bad;
    }
    write("i.index.json", R"({"weight_map": {"b": "s1.safetensors"}})");
    EXPECT_TRUE(contains(error_of([&] { SafetensorsFile::open(path("i.index.json")); }),
                         "does not hold it"));
    write("i.index.json", R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
    EXPECT_TRUE(contains(error_of([&] { SafetensorsFile::open(path("i.index.json")); }),
                         "is in two shards"));
    write("i.index.json", R"({"weight_map": {}})");
    EXPECT_TRUE(contains(error_of([&] { SafetensorsFile::open(path("i.index.json")); }),
                         path("i.index.json")));
}

TEST(ShardSize, ReadsSavePretrainedSpellings) {
    EXPECT_EQ(parse_shard_size("5GB"), 5000000000ull);
    EXPECT_EQ(parse_shard_size("2GiB"), 2ull << 30);
    EXPECT_EQ(parse_shard_size("300KB"), 300000ull);
    EXPECT_EQ(parse_shard_size("1000"), 1000ull);
    EXPECT_TRUE(contains(error_of([] { parse_shard_size("lots"); }), "max_shard_size 'lots'"));
    EXPECT_TRUE(contains(error_of([] { parse_shard_size("5 parsecs"); }), "max_shard_size"));
}

}  // namespace
}  // namespace loom
