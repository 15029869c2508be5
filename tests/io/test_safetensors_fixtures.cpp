// The Hugging Face fixtures open, and what the reader reports agrees with two
// independent sources: manifest.json (written by the generator from the torch
// model) and the raw bytes parsed here without the reader. A few values are
// pinned to numbers read from the files with numpy.
#include <nlohmann/json.hpp>

#include <cstring>
#include <set>

#include "io/batch.h"
#include "io/safetensors.h"
#include "io_test_util.h"

namespace loom {
namespace {

const std::string k_hf = std::string(LOOM_TEST_DATA_DIR) + "/hf/";

std::vector<std::string> fixture_dirs() {
    std::vector<std::string> dirs;
    for (const auto& e : std::filesystem::directory_iterator(k_hf))
        if (e.is_directory() && std::filesystem::exists(e.path() / "model.safetensors"))
            dirs.push_back(e.path().filename().string());
    std::sort(dirs.begin(), dirs.end());
    return dirs;
}

nlohmann::json read_json(const std::string& p) {
    return nlohmann::json::parse(test::read_all(p));
}

TEST(SafetensorsFixtures, AllThirteenFixturesArePresent) {
    // BERT family, GPT-2, Llama, Mistral, Qwen2, and the LoRA adapter on llama-lm.
    EXPECT_EQ(fixture_dirs().size(), 14u);
}

TEST(SafetensorsFixtures, EveryFileMatchesItsRawBytes) {
    // For every tensor of every fixture file: dtype, shape and the bytes behind
    // the view equal what an independent parse of the header and data finds.
    for (const std::string& d : fixture_dirs()) {
        for (const char* file : {"model", "batch", "expected", "after_adamw"}) {
            const std::string p = k_hf + d + "/" + file + ".safetensors";
            SCOPED_TRACE(p);
            SafetensorsFile f = SafetensorsFile::open(p);
            const std::string raw = test::read_all(p);
            uint64_t n = 0;
            std::memcpy(&n, raw.data(), 8);
            auto header = nlohmann::json::parse(raw.substr(8, n));
            size_t count = 0;
            for (const auto& [name, e] : header.items()) {
                if (name == "__metadata__") continue;
                ++count;
                Tensor t = f.get(name);
                EXPECT_EQ(dtype_safetensors_name(t.dtype), e["dtype"].get<std::string>()) << name;
                auto dims = e["shape"].get<std::vector<int64_t>>();
                EXPECT_EQ(t.shape, Shape::from(dims.begin(), dims.end())) << name;
                auto begin = e["data_offsets"][0].get<size_t>();
                auto end = e["data_offsets"][1].get<size_t>();
                ASSERT_EQ(t.nbytes(), end - begin) << name;
                EXPECT_EQ(std::memcmp(t.raw(), raw.data() + 8 + n + begin, t.nbytes()), 0) << name;
            }
            EXPECT_EQ(f.names().size(), count);
            EXPECT_GT(count, 0u);
        }
    }
}

TEST(SafetensorsFixtures, ModelMatchesManifest) {
    for (const std::string& d : fixture_dirs()) {
        SCOPED_TRACE(d);
        SafetensorsFile base = SafetensorsFile::open(k_hf + d + "/model.safetensors");
        auto m = read_json(k_hf + d + "/manifest.json");
        EXPECT_EQ(base.metadata().at("format"), "pt");

        auto keys = m["model_safetensors_keys"].get<std::vector<std::string>>();
        EXPECT_EQ(std::set<std::string>(base.names().begin(), base.names().end()),
                  std::set<std::string>(keys.begin(), keys.end()));
        // A LoRA fixture's parameters (and its AdamW step) are the adapter's.
        const bool lora = std::filesystem::exists(k_hf + d + "/adapter_config.json");
        SafetensorsFile f = SafetensorsFile::open(
            k_hf + d + (lora ? "/adapter_model.safetensors" : "/model.safetensors"));
        if (lora) {
            auto akeys = m["adapter_safetensors_keys"].get<std::vector<std::string>>();
            EXPECT_EQ(std::set<std::string>(f.names().begin(), f.names().end()),
                      std::set<std::string>(akeys.begin(), akeys.end()));
        }
        int64_t params = 0;
        for (const auto& [name, dims_json] : m["parameters"].items()) {
            if (m["tied_not_saved"].contains(name)) {
                EXPECT_FALSE(f.contains(name)) << name << " is tied and should not be stored";
                continue;
            }
            auto dims = dims_json.get<std::vector<int64_t>>();
            Tensor t = f.get(name, DType::f32, Shape::from(dims.begin(), dims.end()));
            params += t.numel();
        }
        EXPECT_EQ(params, m["num_parameters"].get<int64_t>());

        // after_adamw holds the same keys, shapes and dtypes.
        SafetensorsFile after = SafetensorsFile::open(k_hf + d + "/after_adamw.safetensors");
        ASSERT_EQ(after.names().size(), f.names().size());
        for (const std::string& name : f.names()) after.get(name, f.dtype(name), f.shape(name));

        // The stored loss equals the manifest's float32 loss.
        SafetensorsFile expected = SafetensorsFile::open(k_hf + d + "/expected.safetensors");
        Tensor loss = expected.get("loss", DType::f32, {});
        EXPECT_EQ(loss.data<float>()[0], m["loss_float32"].get<float>());
    }
}

TEST(SafetensorsFixtures, BatchesMatchManifest) {
    for (const std::string& d : fixture_dirs()) {
        SCOPED_TRACE(d);
        Batch b = load_batch(k_hf + d + "/batch.safetensors");
        auto m = read_json(k_hf + d + "/manifest.json");
        ASSERT_EQ(b.tensors.size(), m["batch"].size());
        for (const auto& [key, info] : m["batch"].items()) {
            EXPECT_EQ(info["dtype"], "int64");
            auto dims = info["shape"].get<std::vector<int64_t>>();
            const Tensor& t = b.require(key);
            EXPECT_EQ(t.dtype, DType::i64);
            EXPECT_EQ(t.shape, Shape::from(dims.begin(), dims.end())) << key;
        }
        // row_lengths: the attention mask has that many leading ones per row.
        const Tensor& mask = b.require("attention_mask");
        auto lengths = m["row_lengths"].get<std::vector<int64_t>>();
        ASSERT_EQ(int64_t(lengths.size()), mask.shape[0]);
        for (int64_t r = 0; r < mask.shape[0]; ++r) {
            int64_t ones = 0;
            for (int64_t c = 0; c < mask.shape[1]; ++c)
                ones += mask.data<int64_t>()[r * mask.shape[1] + c];
            EXPECT_EQ(ones, lengths[size_t(r)]) << "row " << r;
        }
    }
}

TEST(SafetensorsFixtures, KnownValues) {
    // Numbers read from the files with numpy (np.frombuffer on the raw data).
    SafetensorsFile f = SafetensorsFile::open(k_hf + "bert-cls/model.safetensors");
    Tensor ln = f.get("bert.embeddings.LayerNorm.bias", DType::f32, {64});
    EXPECT_EQ(ln.data<float>()[0], 0.028076643f);
    EXPECT_EQ(ln.data<float>()[63], 0.061333805f);
    Tensor pool = f.get("bert.pooler.dense.weight", DType::f32, {64, 64});
    EXPECT_EQ(pool.data<float>()[0], 0.0639481f);
    EXPECT_EQ(pool.data<float>()[64 * 64 - 1], -0.053711273f);
    double sum = 0;
    for (int64_t i = 0; i < pool.numel(); ++i) sum += pool.data<float>()[i];
    EXPECT_NEAR(sum, -1.2886709162189618, 1e-9);

    SafetensorsFile g = SafetensorsFile::open(k_hf + "gpt2-lm/model.safetensors");
    EXPECT_FALSE(g.contains("lm_head.weight"));
    Tensor wte = g.get("transformer.wte.weight", DType::f32, {1000, 64});
    EXPECT_EQ(wte.data<float>()[0], 0.005249091f);
    EXPECT_EQ(wte.data<float>()[999 * 64 + 63], 0.0092357015f);

    Batch b = load_batch(k_hf + "bert-cls/batch.safetensors");
    const Tensor& ids = b.require("input_ids");
    const int64_t row1[16] = {2, 100, 315, 37, 941, 3, 819, 821, 26, 278, 3, 0, 0, 0, 0, 0};
    for (int i = 0; i < 16; ++i) EXPECT_EQ(ids.data<int64_t>()[16 + i], row1[i]) << i;
    const Tensor& labels = b.require("labels");
    EXPECT_EQ(labels.shape, Shape({3}));
    EXPECT_EQ(labels.data<int64_t>()[0], 2);
    EXPECT_EQ(labels.data<int64_t>()[2], 1);
    EXPECT_EQ(b.require("token_type_ids").data<int64_t>()[9], 1);
}

}  // namespace
}  // namespace loom
