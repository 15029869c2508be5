// Loading and saving models by HF name: shape errors, missing tensors, newly
// initialised heads, base-model prefixes, tied weights saved once; and batch
// errors. Every error test asserts the message names the file and the tensor
// or key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <unistd.h>

#include "core/check.h"
#include "hf_fixture.h"

namespace loom::test {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

class TempDir {
public:
    TempDir() {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        path_ = std::filesystem::temp_directory_path() /
                (std::string("loom_models_") + info->name() + "_" + std::to_string(::getpid()));
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~TempDir() { std::filesystem::remove_all(path_); }
    std::string file(const std::string& name) const { return (path_ / name).string(); }

private:
    std::filesystem::path path_;
};

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "expected a loom::Error";
    return "";
}

TEST(ModelLoad, ShapeDisagreeingWithConfigNamesTensorAndShapes) {
    ModelConfig c = load_hf_config(hf_dir() + "/bert-cls");
    c.intermediate_size = 96;  // the checkpoint has 128
    auto model = build_model(c);
    const std::string file = hf_dir() + "/bert-cls/model.safetensors";
    const std::string msg = error_of([&] { model->load(SafetensorsFile::open(file)); });
    EXPECT_THAT(msg, HasSubstr(file));
    EXPECT_THAT(msg, HasSubstr("'bert.encoder.layer.0.intermediate.dense.weight'"));
    EXPECT_THAT(msg, HasSubstr("[128, 64]"));  // found
    EXPECT_THAT(msg, HasSubstr("[96, 64]"));   // expected
    EXPECT_THAT(msg, HasSubstr("config.json"));
}

TEST(ModelLoad, MissingEncoderTensorIsAnError) {
    TempDir tmp;
    auto all = read_tensors(hf_dir() + "/bert-cls/model.safetensors");
    all.erase("bert.encoder.layer.1.output.dense.weight");
    const std::string file = tmp.file("model.safetensors");
    safetensors_write(file, all);
    auto model = build_model(load_hf_config(hf_dir() + "/bert-cls"));
    const std::string msg = error_of([&] { model->load(SafetensorsFile::open(file)); });
    EXPECT_THAT(msg, HasSubstr(file));
    EXPECT_THAT(msg, HasSubstr("missing tensor 'bert.encoder.layer.1.output.dense.weight'"));
    EXPECT_THAT(msg, HasSubstr("[64, 128]"));
}

// Fine-tuning a masked-LM checkpoint for classification: the pooler and the
// classifier are new (initialised like HF, reported); the MLM head is unused.
TEST(ModelLoad, NewHeadIsInitialisedAndReported) {
    ModelConfig c = load_hf_config(hf_dir() + "/bert-mlm");
    config_set_task(c, Task::sequence_classification, 5);
    auto model = build_model(c);
    const LoadReport r =
        model->load(SafetensorsFile::open(hf_dir() + "/bert-mlm/model.safetensors"), 7);
    EXPECT_THAT(r.newly_initialised, Contains("classifier.weight"));
    EXPECT_THAT(r.newly_initialised, Contains("classifier.bias"));
    EXPECT_THAT(r.newly_initialised, Contains("bert.pooler.dense.weight"));
    EXPECT_EQ(r.newly_initialised.size(), 4u);
    EXPECT_THAT(r.unused, Contains("cls.predictions.bias"));
    EXPECT_THAT(r.unused, Contains("cls.predictions.transform.dense.weight"));

    const ParamTable& t = model->params();
    const Tensor w = t.param_tensor(t.index("classifier.weight"));
    EXPECT_EQ(w.shape, (Shape{5, 64}));
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < w.numel(); ++i) {
        sum += w.data<float>()[i];
        sq += double(w.data<float>()[i]) * w.data<float>()[i];
    }
    const double std = std::sqrt(sq / double(w.numel()) - std::pow(sum / double(w.numel()), 2));
    EXPECT_NEAR(std, c.initializer_range, 0.01);  // N(0, initializer_range)
    const Tensor b = t.param_tensor(t.index("classifier.bias"));
    for (int64_t i = 0; i < b.numel(); ++i) EXPECT_EQ(b.data<float>()[i], 0.0f);

    // The encoder itself came from the file.
    const auto ref = read_tensors(hf_dir() + "/bert-mlm/model.safetensors");
    const Tensor q = t.param_tensor(t.index("bert.encoder.layer.1.attention.self.query.weight"));
    EXPECT_EQ(0, std::memcmp(q.raw(), ref.at("bert.encoder.layer.1.attention.self.query.weight").raw(),
                             q.nbytes()));
}

// A checkpoint saved from the base model (BertModel: no "bert." prefix) loads
// into a model with a head.
TEST(ModelLoad, BaseModelCheckpointWithoutPrefix) {
    TempDir tmp;
    std::map<std::string, Tensor> stripped;
    for (auto& [k, v] : read_tensors(hf_dir() + "/bert-cls/model.safetensors"))
        stripped[k.rfind("bert.", 0) == 0 ? k.substr(5) : k] = v;
    safetensors_write(tmp.file("model.safetensors"), stripped);
    auto model = build_model(load_hf_config(hf_dir() + "/bert-cls"));
    const LoadReport r = model->load(SafetensorsFile::open(tmp.file("model.safetensors")));
    EXPECT_TRUE(r.newly_initialised.empty());
    EXPECT_TRUE(r.unused.empty());
}

// Tied weights are stored once; a save/load round trip reproduces the model.
TEST(ModelSave, TiedWeightsOnceAndRoundTrip) {
    TempDir tmp;
    auto model = build_model(load_hf_config(hf_dir() + "/gpt2-lm"));
    model->load(SafetensorsFile::open(hf_dir() + "/gpt2-lm/model.safetensors"));
    safetensors_write(tmp.file("model.safetensors"), model->params().param_tensors(), {{"format", "pt"}});
    const SafetensorsFile saved = SafetensorsFile::open(tmp.file("model.safetensors"));
    EXPECT_FALSE(saved.contains("lm_head.weight"));
    EXPECT_TRUE(saved.contains("transformer.wte.weight"));
    const auto ref = read_tensors(hf_dir() + "/gpt2-lm/model.safetensors");
    EXPECT_EQ(saved.names().size(), ref.size());
    for (const auto& [k, v] : ref) {
        const Tensor s = saved.get(k);
        ASSERT_EQ(s.shape, v.shape) << k;
        EXPECT_EQ(0, std::memcmp(s.raw(), v.raw(), v.nbytes())) << k;
    }
    EXPECT_EQ(saved.metadata().at("format"), "pt");
    // lm_head.weight resolves to the same row as wte.
    const ParamTable& t = model->params();
    EXPECT_EQ(t.find("lm_head.weight"), t.find("transformer.wte.weight"));
}

// Some checkpoints store a tied copy anyway (lm_head.weight next to wte): it is
// the same tensor, loaded once, and not reported as unused.
TEST(ModelLoad, StoredTiedCopyIsNotUnused) {
    TempDir tmp;
    auto all = read_tensors(hf_dir() + "/gpt2-lm/model.safetensors");
    all["lm_head.weight"] = all.at("transformer.wte.weight");
    safetensors_write(tmp.file("model.safetensors"), all);
    auto model = build_model(load_hf_config(hf_dir() + "/gpt2-lm"));
    const LoadReport r = model->load(SafetensorsFile::open(tmp.file("model.safetensors")));
    EXPECT_TRUE(r.unused.empty()) << r.unused.front();
    EXPECT_TRUE(r.newly_initialised.empty());
}

TEST(ModelBuild, UnsupportedTaskForFamily) {
    ModelConfig c = load_hf_config(hf_dir() + "/gpt2-lm");
    c.task = Task::masked_lm;
    const std::string msg = error_of([&] { build_model(c); });
    EXPECT_THAT(msg, HasSubstr("masked-lm"));
    EXPECT_THAT(msg, HasSubstr("gpt2"));
    EXPECT_THAT(msg, HasSubstr("causal-lm"));
}

TEST(ModelBuild, UnknownActivationNamesConfigKey) {
    ModelConfig c = load_hf_config(hf_dir() + "/bert-cls");
    c.hidden_act = "swishy";
    const std::string msg = error_of([&] { build_model(c); });
    EXPECT_THAT(msg, HasSubstr("bert-cls/config.json"));
    EXPECT_THAT(msg, HasSubstr("hidden_act 'swishy'"));
}

TEST(ModelBuild, AlbertGroupsAndInnerLayers) {
    ModelConfig c = load_hf_config(hf_dir() + "/albert-mlm");
    c.num_hidden_layers = 4;
    c.num_hidden_groups = 2;
    c.inner_group_num = 2;
    auto model = build_model(c);
    const ParamTable& t = model->params();
    EXPECT_GE(t.find("albert.encoder.albert_layer_groups.1.albert_layers.1.ffn.weight"), 0);
    EXPECT_LT(t.find("albert.encoder.albert_layer_groups.2.albert_layers.0.ffn.weight"), 0);
    model->init(3);
    const Fixture f("albert-mlm");
    model->forward(f.inputs(), DropoutPlan{});
    EXPECT_EQ(model->num_hidden_states(), 5);  // embeddings + 4 layers
}

TEST(Batch, MissingKeyNamesFileAndKey) {
    TempDir tmp;
    auto all = read_tensors(hf_dir() + "/bert-cls/batch.safetensors");
    all.erase("labels");
    const std::string file = tmp.file("batch.safetensors");
    safetensors_write(file, all);
    const Batch b = load_batch(file);
    const ModelConfig c = load_hf_config(hf_dir() + "/bert-cls");
    const std::string msg = error_of([&] { inputs_from_batch(b, c.task, /*require_labels=*/true); });
    EXPECT_THAT(msg, HasSubstr(file));
    EXPECT_THAT(msg, HasSubstr("labels"));
    // Without labels required, the same batch runs forward only.
    EXPECT_EQ(inputs_from_batch(b, c.task, false).labels, nullptr);

    all.erase("input_ids");
    safetensors_write(file, all);
    const Batch b2 = load_batch(file);
    const std::string msg2 = error_of([&] { inputs_from_batch(b2, c.task, false); });
    EXPECT_THAT(msg2, HasSubstr(file));
    EXPECT_THAT(msg2, HasSubstr("input_ids"));
}

TEST(Batch, WrongLabelShapeNamesKey) {
    // Token-level labels [B, T] given to a classifier that wants [B].
    const Batch b = load_batch(hf_dir() + "/bert-mlm/batch.safetensors");
    const ModelConfig c = load_hf_config(hf_dir() + "/bert-cls");
    const std::string msg = error_of([&] { inputs_from_batch(b, c.task, true); });
    EXPECT_THAT(msg, HasSubstr("'labels' has shape [3, 16], expected [3]"));
    EXPECT_THAT(msg, HasSubstr("bert-mlm/batch.safetensors"));
}

TEST(Batch, SequenceLongerThanPositionsIsAnError) {
    ModelConfig c = load_hf_config(hf_dir() + "/bert-cls");
    c.max_position_embeddings = 8;
    auto model = build_model(c);
    model->init(1);
    const Fixture f("bert-cls");
    const std::string msg = error_of([&] { model->forward(f.inputs(), DropoutPlan{}); });
    EXPECT_THAT(msg, HasSubstr("sequence length 16 exceeds what the model accepts: 8 positions "
                               "(max_position_embeddings 8)"));
}

}  // namespace
}  // namespace loom::test
