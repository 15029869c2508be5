// The Llama family's config.json (LlamaConfig, MistralConfig, Qwen2Config,
// transformers 4.40): defaults,
// the keys that change the math, the export round trip, clear refusals of
// what is not implemented, and a model that refuses a kernel table without
// the family's kernels.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "hf_fixture.h"
#include "io/safetensors.h"
#include "models/model_config.h"
#include "ops/device_ops.h"

namespace loom::test {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

json tiny_llama() {
    return json{{"architectures", {"LlamaForCausalLM"}},
                {"model_type", "llama"},
                {"vocab_size", 64},
                {"hidden_size", 32},
                {"num_hidden_layers", 1},
                {"num_attention_heads", 4},
                {"intermediate_size", 48}};
}

std::string parse_error(const json& j) {
    try {
        parse_hf_config(j.dump(), "m/config.json");
    } catch (const Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "no error for " << j.dump();
    return "";
}

TEST(LlamaConfig, FixtureKeys) {
    const ModelConfig c = load_hf_config(hf_dir() + "/llama-lm");
    EXPECT_EQ(c.family, ModelFamily::llama);
    EXPECT_EQ(c.task, Task::causal_lm);
    EXPECT_EQ(c.num_key_value_heads, 2);
    EXPECT_EQ(c.kv_heads(), 2);
    EXPECT_EQ(c.rope_theta, 500000.0);
    EXPECT_EQ(c.rope_scaling_factor, 1.0);
    EXPECT_EQ(c.layer_norm_eps, 1e-5);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_EQ(c.hidden_dropout, 0.0);
    EXPECT_EQ(c.pad_token_id, -1);
}

TEST(LlamaConfig, LlamaConfigDefaults) {
    const ModelConfig c = parse_hf_config(tiny_llama().dump(), "m/config.json");
    EXPECT_EQ(c.kv_heads(), 4);  // num_key_value_heads absent: plain multi-head
    EXPECT_EQ(c.rope_theta, 10000.0);
    EXPECT_EQ(c.layer_norm_eps, 1e-6);
    EXPECT_EQ(c.max_position_embeddings, 2048);
    EXPECT_FALSE(c.tie_word_embeddings);  // unlike the encoders and GPT-2
    EXPECT_EQ(c.hidden_act, "silu");
}

TEST(LlamaConfig, LinearRopeScalingIsReadAndExported) {
    json j = tiny_llama();
    j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
    j["num_key_value_heads"] = 2;
    const ModelConfig c = parse_hf_config(j.dump(), "m/config.json");
    EXPECT_EQ(c.rope_scaling_factor, 4.0);
    const ModelConfig back = parse_hf_config(config_to_json(c), "export/config.json");
    EXPECT_EQ(back.rope_scaling_factor, 4.0);
    EXPECT_EQ(back.kv_heads(), 2);
    EXPECT_EQ(back.family, ModelFamily::llama);
    EXPECT_EQ(back.architecture, "LlamaForCausalLM");
    EXPECT_FALSE(back.tie_word_embeddings);
}

TEST(LlamaConfig, DynamicRopeScalingIsReadExportedAndLiftsTheLengthLimit) {
    json j = tiny_llama();
    j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
    const ModelConfig c = parse_hf_config(j.dump(), "m/config.json");
    EXPECT_EQ(c.rope_scaling_factor, 2.0);
    EXPECT_TRUE(c.rope_scaling_dynamic);
    const json out = json::parse(config_to_json(c));
    EXPECT_EQ(out["rope_scaling"]["type"], "dynamic");
    EXPECT_EQ(out["rope_scaling"]["factor"], 2.0);
    EXPECT_TRUE(parse_hf_config(out.dump(), "export/config.json").rope_scaling_dynamic);
    // Past max_position_embeddings is what dynamic scaling is for; without it
    // the length is refused as before.
    EXPECT_NO_THROW(check_max_length(c, "max_seq_length", 2 * c.max_position_embeddings));
    const ModelConfig plain = parse_hf_config(tiny_llama().dump(), "m/config.json");
    EXPECT_THROW(check_max_length(plain, "max_seq_length", plain.max_position_embeddings + 1),
                 Error);
}

TEST(LlamaConfig, RopeScalingOnMistralOrQwen2IsRefusedAsHfIgnoresIt) {
    for (const char* type : {"mistral", "qwen2"}) {
        json j = tiny_llama();
        j["model_type"] = type;
        j["architectures"] = {std::string(type) == "mistral" ? "MistralForCausalLM"
                                                             : "Qwen2ForCausalLM"};
        j["num_key_value_heads"] = 2;
        j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
        EXPECT_THAT(parse_error(j), HasSubstr("'rope_scaling' is read only by Llama")) << type;
        j["rope_scaling"] = nullptr;
        EXPECT_NO_THROW(parse_hf_config(j.dump(), "m/config.json")) << type;
    }
}

TEST(LlamaConfig, RefusalsNameTheKey) {
    json j = tiny_llama();
    j["rope_scaling"] = {{"type", "yarn"}, {"factor", 2.0}};
    EXPECT_THAT(parse_error(j), HasSubstr("rope_scaling type 'yarn' is not supported (expected "
                                          "'linear' or 'dynamic'"));
    j = tiny_llama();
    j["num_key_value_heads"] = 3;
    EXPECT_THAT(parse_error(j), HasSubstr("must be a multiple of num_key_value_heads 3"));
    j = tiny_llama();
    j["hidden_act"] = "gelu";
    EXPECT_THAT(parse_error(j), HasSubstr("hidden_act 'gelu' is not supported for llama"));
    j = tiny_llama();
    j.erase("intermediate_size");
    EXPECT_THAT(parse_error(j),
                HasSubstr("m/config.json: missing required key 'intermediate_size'"));
    j = tiny_llama();
    j["rope_scaling"] = {{"type", "linear"}, {"factor", 0.5}};
    EXPECT_THAT(parse_error(j), HasSubstr("rope_scaling factor must be a number > 1"));
}

// Attention bias and tied embeddings add or drop the rows they name.
TEST(LlamaConfig, BiasAndTyingChangeTheRows) {
    json j = tiny_llama();
    const auto plain = build_model(parse_hf_config(j.dump(), "m/config.json"));
    j["attention_bias"] = true;
    j["tie_word_embeddings"] = true;
    const auto other = build_model(parse_hf_config(j.dump(), "m/config.json"));
    EXPECT_GE(plain->params().find("lm_head.weight"), 0);
    EXPECT_LT(plain->params().find("model.layers.0.self_attn.q_proj.bias"), 0);
    EXPECT_GE(other->params().find("model.layers.0.self_attn.q_proj.bias"), 0);
    EXPECT_GE(other->params().find("model.layers.0.self_attn.o_proj.bias"), 0);
    // Tied: one row, the decoder an alias of the embeddings.
    EXPECT_EQ(other->params().num_parameters(),
              plain->params().num_parameters() - 64 * 32 + 3 * 32 + 32);
}

// Mistral's window is w + 1 keys with the query's own: sliding_window 6
// gives HF's logits, 5 (i - j < w) and none do not (the fixture README).
TEST(LlamaConfig, MistralWindowBoundaryIsHfs) {
    const Fixture f("mistral-lm");
    ASSERT_EQ(f.config.sliding_window, 6);
    auto logits_for = [&](int64_t window) {
        ModelConfig c = f.config;
        c.sliding_window = window;
        auto m = build_model(c);
        m->load(SafetensorsFile::open(f.dir + "/model.safetensors"));
        m->forward(f.inputs(), DropoutPlan{});
        return m->outputs().at("logits").clone();
    };
    const Tensor& want = f.expected.at("logits");
    const Tol tol = f.tol("logits");
    EXPECT_TRUE(close("window 6", logits_for(6), want, tol));
    EXPECT_FALSE(close("window 5", logits_for(5), want, tol));
    EXPECT_FALSE(close("no window", logits_for(-1), want, tol));
}

TEST(LlamaConfig, MistralAndQwen2Keys) {
    const ModelConfig m = load_hf_config(hf_dir() + "/mistral-lm");
    EXPECT_EQ(m.family, ModelFamily::mistral);
    EXPECT_EQ(m.sliding_window, 6);
    EXPECT_FALSE(m.qkv_bias);
    const ModelConfig q = load_hf_config(hf_dir() + "/qwen2-lm");
    EXPECT_EQ(q.family, ModelFamily::qwen2);
    EXPECT_EQ(q.sliding_window, -1);  // use_sliding_window false
    EXPECT_TRUE(q.qkv_bias);
    EXPECT_TRUE(q.tie_word_embeddings);
    EXPECT_EQ(q.rope_theta, 1e6);
    // Qwen2 biases q, k and v but not o_proj; the tied head stores no row.
    auto model = build_model(q);
    EXPECT_GE(model->params().find("model.layers.0.self_attn.k_proj.bias"), 0);
    EXPECT_LT(model->params().find("model.layers.0.self_attn.o_proj.bias"), 0);
    EXPECT_EQ(model->params().row(model->params().find("lm_head.weight")).name,
              "model.embed_tokens.weight");
    // A window on some layers only is refused.
    json j = json::parse(q.json_text);
    j["use_sliding_window"] = true;
    j["max_window_layers"] = 1;
    EXPECT_THAT(parse_error(j), HasSubstr("max_window_layers 1 < num_hidden_layers 2"));
    j["max_window_layers"] = 28;
    EXPECT_EQ(parse_hf_config(j.dump(), "q/config.json").sliding_window, 4096);
    // Mistral: a null window is none.
    json mj = json::parse(m.json_text);
    mj["sliding_window"] = nullptr;
    EXPECT_EQ(parse_hf_config(mj.dump(), "m/config.json").sliding_window, -1);
}

// LlamaForSequenceClassification pools each row at its last token before
// the first pad id (the fixture's rows at 15, 10, 15): without a pad id in
// the config, a batch of several rows has no such token and is refused.
TEST(LlamaConfig, ClassifierNeedsThePadIdForBatches) {
    const Fixture f("llama-cls");
    ASSERT_EQ(f.config.pad_token_id, 0);
    ASSERT_EQ(f.config.task, Task::sequence_classification);
    ModelConfig c = f.config;
    c.pad_token_id = -1;
    auto m = build_model(c);
    m->load(SafetensorsFile::open(f.dir + "/model.safetensors"));
    try {
        m->forward(f.inputs(), DropoutPlan{});
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_THAT(std::string(e.what()), HasSubstr("needs pad_token_id in the model config"));
    }
}

// A backend whose table lacks a Llama kernel: the model says so by name.
class NoDecoderBackend final : public Backend {
  public:
    NoDecoderBackend() : Backend(ops_) {}
    Device device() const override { return Device::cpu; }
    std::string name() const override { return "nodecoder"; }
    std::shared_ptr<Storage> alloc(size_t n) override { return cpu_backend().alloc(n); }
    void to_device(void* d, const void* h, size_t n) override { cpu_backend().to_device(d, h, n); }
    void to_host(void* h, const void* s, size_t n) override { cpu_backend().to_host(h, s, n); }
    void copy(void* d, const void* s, size_t n) override { cpu_backend().copy(d, s, n); }
    void copy_2d(void* d, size_t dp, const void* s, size_t sp, size_t rb, size_t rows) override {
        cpu_backend().copy_2d(d, dp, s, sp, rb, rows);
    }
    void zero(void* p, size_t n) override { cpu_backend().zero(p, n); }
    void synchronize() override {}

  private:
    static inline NnOps nn_ = [] {
        NnOps n = *cpu_backend().ops().nn;
        n.rope = nullptr;
        return n;
    }();
    static inline DeviceOps ops_ = [] {
        DeviceOps o = cpu_backend().ops();
        o.nn = &nn_;
        return o;
    }();
};

TEST(LlamaConfig, LlamaRefusesATableWithoutItsKernels) {
    NoDecoderBackend be;
    ModelPlacement p;
    p.device.be = &be;
    try {
        build_model(load_hf_config(hf_dir() + "/llama-lm"), p);
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_THAT(std::string(e.what()),
                    HasSubstr("LlamaForCausalLM has no nodecoder kernel yet"));
    }
}

}  // namespace
}  // namespace loom::test
