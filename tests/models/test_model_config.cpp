// config.json parsing for the five families, export, and bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "hf_fixture.h"
#include "models/model_config.h"

namespace loom::test {
namespace {

using ::testing::HasSubstr;

std::string fixture_config_text(const std::string& name) {
    std::ifstream in(hf_dir() + "/" + name + "/config.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Expects parse_hf_config to throw, returning the message.
std::string parse_error(const std::string& text, const std::string& source = "dir/config.json") {
    try {
        parse_hf_config(text, source);
    } catch (const Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "no error for " << text;
    return "";
}

TEST(HfConfig, BertFixture) {
    const ModelConfig c = load_hf_config(hf_dir() + "/bert-mlm");
    EXPECT_EQ(c.family, ModelFamily::bert);
    EXPECT_EQ(c.task, Task::masked_lm);
    EXPECT_EQ(c.architecture, "BertForMaskedLM");
    EXPECT_EQ(c.vocab_size, 1000);
    EXPECT_EQ(c.hidden_size, 64);
    EXPECT_EQ(c.num_hidden_layers, 2);
    EXPECT_EQ(c.num_attention_heads, 4);
    EXPECT_EQ(c.intermediate_size, 128);
    EXPECT_EQ(c.embedding_size, 64);
    EXPECT_EQ(c.max_position_embeddings, 64);
    EXPECT_EQ(c.type_vocab_size, 2);
    EXPECT_EQ(c.pad_token_id, 0);
    EXPECT_EQ(c.hidden_act, "gelu");
    EXPECT_DOUBLE_EQ(c.layer_norm_eps, 1e-12);
    EXPECT_DOUBLE_EQ(c.initializer_range, 0.05);
    EXPECT_EQ(c.hidden_dropout, 0.0);
    // classifier_dropout null means hidden_dropout_prob.
    EXPECT_EQ(c.classifier_dropout, 0.0);
    EXPECT_THAT(c.source, HasSubstr("bert-mlm/config.json"));
}

TEST(HfConfig, FamilyKeyNames) {
    const ModelConfig d = load_hf_config(hf_dir() + "/distilbert-cls");
    EXPECT_EQ(d.family, ModelFamily::distilbert);
    EXPECT_EQ(d.task, Task::sequence_classification);
    EXPECT_EQ(d.hidden_size, 64);          // dim
    EXPECT_EQ(d.num_hidden_layers, 2);     // n_layers
    EXPECT_EQ(d.intermediate_size, 128);   // hidden_dim
    EXPECT_EQ(d.type_vocab_size, 0);
    EXPECT_DOUBLE_EQ(d.layer_norm_eps, 1e-12);  // fixed in DistilBERT
    EXPECT_EQ(d.num_labels, 3);
    EXPECT_EQ(d.id2label[2], "LABEL_2");

    const ModelConfig g = load_hf_config(hf_dir() + "/gpt2-lm/config.json");
    EXPECT_EQ(g.family, ModelFamily::gpt2);
    EXPECT_EQ(g.task, Task::causal_lm);
    EXPECT_EQ(g.hidden_size, 64);  // n_embd
    EXPECT_EQ(g.intermediate_size, 128);
    EXPECT_EQ(g.max_position_embeddings, 64);  // n_positions
    EXPECT_EQ(g.hidden_act, "gelu_new");       // activation_function
    EXPECT_DOUBLE_EQ(g.layer_norm_eps, 1e-5);  // layer_norm_epsilon
    EXPECT_EQ(g.pad_token_id, -1);

    const ModelConfig a = load_hf_config(hf_dir() + "/albert-mlm");
    EXPECT_EQ(a.family, ModelFamily::albert);
    EXPECT_EQ(a.embedding_size, 32);
    EXPECT_EQ(a.num_hidden_groups, 1);
    EXPECT_EQ(a.inner_group_num, 1);

    const ModelConfig r = load_hf_config(hf_dir() + "/roberta-cls");
    EXPECT_EQ(r.family, ModelFamily::roberta);
    EXPECT_EQ(r.pad_token_id, 1);
    EXPECT_EQ(r.type_vocab_size, 1);
    EXPECT_EQ(r.max_position_embeddings, 66);
    EXPECT_DOUBLE_EQ(r.layer_norm_eps, 1e-5);
}

TEST(HfConfig, Gpt2NullInnerMeansFourTimesHidden) {
    auto j = nlohmann::json::parse(fixture_config_text("gpt2-lm"));
    j["n_inner"] = nullptr;
    const ModelConfig c = parse_hf_config(j.dump(), "x/config.json");
    EXPECT_EQ(c.intermediate_size, 4 * 64);
}

TEST(HfConfig, MissingRequiredKeyNamesFileAndKey) {
    auto j = nlohmann::json::parse(fixture_config_text("bert-cls"));
    j.erase("hidden_size");
    const std::string msg = parse_error(j.dump(), "models/tiny/config.json");
    EXPECT_THAT(msg, HasSubstr("models/tiny/config.json"));
    EXPECT_THAT(msg, HasSubstr("hidden_size"));
    EXPECT_THAT(msg, HasSubstr("missing"));

    auto d = nlohmann::json::parse(fixture_config_text("distilbert-mlm"));
    d.erase("n_heads");
    EXPECT_THAT(parse_error(d.dump()), HasSubstr("'n_heads'"));
}

TEST(HfConfig, UnknownArchitectureListsSupported) {
    auto j = nlohmann::json::parse(fixture_config_text("bert-cls"));
    j["architectures"] = {"BertForNextSentencePrediction"};
    const std::string msg = parse_error(j.dump(), "m/config.json");
    EXPECT_THAT(msg, HasSubstr("m/config.json"));
    EXPECT_THAT(msg, HasSubstr("BertForNextSentencePrediction"));
    EXPECT_THAT(msg, HasSubstr("not supported"));
    EXPECT_THAT(msg, HasSubstr("GPT2LMHeadModel"));  // lists what is supported
}

TEST(HfConfig, WrongTypesAndValues) {
    auto j = nlohmann::json::parse(fixture_config_text("bert-cls"));
    j["num_hidden_layers"] = "two";
    EXPECT_THAT(parse_error(j.dump()), HasSubstr("'num_hidden_layers' must be an integer"));
    j = nlohmann::json::parse(fixture_config_text("bert-cls"));
    j["num_attention_heads"] = 5;  // 64 is not a multiple of 5
    EXPECT_THAT(parse_error(j.dump()), HasSubstr("not a multiple of the 5 attention heads"));
    j = nlohmann::json::parse(fixture_config_text("bert-cls"));
    j["model_type"] = "gpt2";
    EXPECT_THAT(parse_error(j.dump()), HasSubstr("does not match architecture"));
    EXPECT_THAT(parse_error("{not json"), HasSubstr("not valid JSON"));
    EXPECT_THAT(parse_error("[1, 2]"), HasSubstr("JSON object"));
}

TEST(HfConfig, MissingFileNamesPath) {
    try {
        load_hf_config("/nonexistent/model");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("/nonexistent/model/config.json"));
    }
}

TEST(HfConfig, ExportKeepsOriginalAndUpdatesFields) {
    ModelConfig c = load_hf_config(hf_dir() + "/bert-mlm");
    config_set_task(c, Task::sequence_classification, 4);
    c.hidden_dropout = 0.2;
    const auto j = nlohmann::json::parse(config_to_json(c));
    EXPECT_EQ(j["architectures"][0], "BertForSequenceClassification");
    EXPECT_EQ(j["id2label"].size(), 4u);
    EXPECT_EQ(j["label2id"]["LABEL_3"], 3);
    EXPECT_DOUBLE_EQ(j["hidden_dropout_prob"].get<double>(), 0.2);
    EXPECT_EQ(j["transformers_version"], "4.40.2");  // untouched keys survive
    // Round trip.
    const ModelConfig back = parse_hf_config(config_to_json(c), "export");
    EXPECT_EQ(back.task, Task::sequence_classification);
    EXPECT_EQ(back.num_labels, 4);
    EXPECT_EQ(back.hidden_size, c.hidden_size);

    const ModelConfig g = load_hf_config(hf_dir() + "/gpt2-lm");
    const auto jg = nlohmann::json::parse(config_to_json(g));
    EXPECT_EQ(jg["n_embd"], 64);
    EXPECT_FALSE(jg.contains("hidden_size"));
}

// torch_dtype names the stored weights' type; an export writes what it holds.
TEST(HfConfig, TorchDtypeIsReadAndWrittenBack) {
    ModelConfig c = load_hf_config(hf_dir() + "/llama-lm");
    EXPECT_EQ(c.torch_dtype, DType::f32);  // the fixture's "float32"
    c.torch_dtype = DType::bf16;
    auto j = nlohmann::json::parse(config_to_json(c));
    EXPECT_EQ(j["torch_dtype"], "bfloat16");
    EXPECT_EQ(parse_hf_config(j.dump(), "export").torch_dtype, DType::bf16);
    j["torch_dtype"] = "float16";
    EXPECT_EQ(parse_hf_config(j.dump(), "x").torch_dtype, DType::f16);
    j.erase("torch_dtype");
    EXPECT_EQ(parse_hf_config(j.dump(), "x").torch_dtype, DType::f32);
    j["torch_dtype"] = "int8";
    EXPECT_THAT(parse_error(j.dump()),
                HasSubstr("dir/config.json: torch_dtype \"int8\" is not a weight type"));
    EXPECT_EQ(dtype_torch_name(DType::bf16), "bfloat16");
    EXPECT_EQ(dtype_from_name("bfloat16"), DType::bf16);
    EXPECT_EQ(dtype_from_name("float64"), DType::f64);
}

TEST(HfConfig, TaskNames) {
    EXPECT_EQ(task_from_name("masked-lm"), Task::masked_lm);
    EXPECT_EQ(task_from_name("question-answering"), Task::question_answering);
    EXPECT_FALSE(task_from_name("translation").has_value());
    EXPECT_EQ(architecture_name(ModelFamily::albert, Task::question_answering),
              "AlbertForQuestionAnswering");
    EXPECT_THROW(architecture_name(ModelFamily::gpt2, Task::masked_lm), Error);
}

}  // namespace
}  // namespace loom::test
