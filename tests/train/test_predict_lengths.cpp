// Sequence lengths for `loom predict` and `loom train` come from what the
// model accepts (ModelConfig::max_positions): RoBERTa's position table has
// pad_token_id + 1 rows no token uses, the other families none. Predict's
// defaults follow HF's pipelines scaled down to small models, and a length the
// model cannot take is refused before any work, naming the setting, its value
// and the limit.
#include <gtest/gtest.h>

#include "models/model_config.h"
#include "train/predict.h"
#include "trainer_e2e_util.h"

namespace loom::test {
namespace {

// A one-layer config.json of `arch` whose position table has `positions` rows.
ModelConfig config_of(const std::string& arch, const std::string& type, int64_t positions) {
    const char* key = type == "gpt2" ? "n_positions" : "max_position_embeddings";
    return parse_hf_config(
        fmt::format(R"({{"architectures": ["{}"], "model_type": "{}", "vocab_size": 100,
                        "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
                        "intermediate_size": 16, "{}": {}}})",
                    arch, type, key, positions),
        "m/config.json");
}

TEST(PredictLengths, UsablePositionsPerFamily) {
    const ModelConfig roberta = config_of("RobertaForMaskedLM", "roberta", 514);
    EXPECT_EQ(roberta.max_positions(), 512);
    EXPECT_EQ(describe_max_positions(roberta),
              "512 positions (max_position_embeddings 514 minus RoBERTa's offset of 2), "
              "m/config.json");
    EXPECT_EQ(config_of("BertForMaskedLM", "bert", 512).max_positions(), 512);
    EXPECT_EQ(config_of("DistilBertForMaskedLM", "distilbert", 512).max_positions(), 512);
    EXPECT_EQ(config_of("AlbertForMaskedLM", "albert", 512).max_positions(), 512);
    const ModelConfig gpt2 = config_of("GPT2LMHeadModel", "gpt2", 1024);
    EXPECT_EQ(gpt2.max_positions(), 1024);
    EXPECT_EQ(describe_max_positions(gpt2), "1024 positions (n_positions 1024), m/config.json");
    expect_train_error([] { config_of("RobertaForMaskedLM", "roberta", 2); },
                       {"max_position_embeddings 2 leaves no position for a token"});
}

TEST(PredictLengths, DefaultsComeFromTheModel) {
    struct Case {
        const char* arch;
        const char* type;
        int64_t positions, max_seq_length, doc_stride;
    };
    const Case cases[] = {
        {"BertForQuestionAnswering", "bert", 64, 64, 21},
        {"BertForQuestionAnswering", "bert", 128, 128, 42},
        {"BertForQuestionAnswering", "bert", 512, 384, 128},  // HF's QA pipeline
        {"RobertaForQuestionAnswering", "roberta", 514, 384, 128},
        {"RobertaForQuestionAnswering", "roberta", 130, 128, 42},
        {"DistilBertForQuestionAnswering", "distilbert", 32, 32, 10},
        {"RobertaForSequenceClassification", "roberta", 514, 512, 0},
        {"BertForMaskedLM", "bert", 2048, 512, 0},
        {"GPT2LMHeadModel", "gpt2", 1024, 1024, 0},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(std::string(c.arch) + " " + std::to_string(c.positions));
        const PredictLengths l = predict_lengths(config_of(c.arch, c.type, c.positions), {});
        EXPECT_EQ(l.max_seq_length, c.max_seq_length);
        EXPECT_EQ(l.doc_stride, c.doc_stride);
    }
}

TEST(PredictLengths, ValuesPastTheModelAreRefusedNamingTheFlag) {
    const ModelConfig roberta = config_of("RobertaForQuestionAnswering", "roberta", 130);
    PredictOptions o;
    o.max_seq_length = 130;
    expect_train_error(
        [&] { predict_lengths(roberta, o); },
        {"--max-seq-length 130 exceeds what the model accepts: 128 positions "
         "(max_position_embeddings 130 minus RoBERTa's offset of 2), m/config.json"});
    o.max_seq_length = 128;
    EXPECT_EQ(predict_lengths(roberta, o).max_seq_length, 128);
    o.max_seq_length = 0;
    expect_train_error([&] { predict_lengths(roberta, o); }, {"--max-seq-length 0"});

    const ModelConfig bert = config_of("BertForQuestionAnswering", "bert", 64);
    PredictOptions s;
    s.doc_stride = 128;  // the old default
    expect_train_error([&] { predict_lengths(bert, s); },
                       {"--doc-stride 128", "less than max_seq_length 64", "64 positions"});
    s.doc_stride = -1;
    expect_train_error([&] { predict_lengths(bert, s); }, {"--doc-stride -1"});
    s.doc_stride = 63;
    EXPECT_EQ(predict_lengths(bert, s).doc_stride, 63);
}

// RoBERTa's 2 offset rows: a table of 34 rows holds 32 tokens, so
// max_seq_length 34 is refused by train and predict before any step, and 32
// trains and predicts on rows that fill it.
class PredictRoberta : public TrainDir {
  protected:
    std::string roberta_job() {
        const std::string config = write("roberta.json", R"({
            "architectures": ["RobertaForMaskedLM"], "model_type": "roberta",
            "vocab_size": 5859, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 2, "intermediate_size": 64,
            "max_position_embeddings": 34, "type_vocab_size": 1, "pad_token_id": 1})");
        std::string long_text;
        for (int i = 0; i < 40; ++i) long_text += "cat bread ";
        std::string train;
        for (int i = 0; i < 4; ++i)
            train +=
                "{\"text\": \"" + long_text + "\", \"label\": " + std::to_string(i % 2) + "}\n";
        const std::string train_path = write("train.jsonl", train);
        eval_ = false;
        std::string t = job_text("sequence-classification", "out",
                                 "  max_steps: 1\n  per_device_train_batch_size: 4\n");
        const std::string from_config = data_path("train/tiny-bert.json");
        t.replace(t.find(from_config), from_config.size(), config);
        const std::string from_train = data_path("train/cls_train.jsonl");
        t.replace(t.find(from_train), from_train.size(), train_path);
        return t;
    }
};

TEST_F(PredictRoberta, TheTableLessTheOffsetIsTheLimit) {
    const std::string text = roberta_job();
    expect_train_error([&] { Trainer(job(text, {"data.max_seq_length=34"}), quiet()); },
                       {"data.max_seq_length 34 exceeds what the model accepts: 32 positions "
                        "(max_position_embeddings 34 minus RoBERTa's offset of 2)",
                        "roberta.json"});

    Trainer tr(job(text, {"data.max_seq_length=32"}), quiet());
    size_t longest = 0;
    for (const Feature& f : tr.train_data()->features) longest = std::max(longest, f.ids.size());
    EXPECT_EQ(longest, 32u);
    EXPECT_EQ(tr.train().global_step, 1);

    PredictOptions po;
    po.max_seq_length = 34;
    expect_train_error([&] { Predictor(path("out"), po); },
                       {"--max-seq-length 34 exceeds what the model accepts: 32 positions"});
    Predictor p(path("out"));
    EXPECT_EQ(p.lengths().max_seq_length, 32);
    const auto got = p.predict_file(path("train.jsonl"));
    ASSERT_EQ(got.size(), 4u);
    EXPECT_EQ(p.truncated(), 4);
}

}  // namespace
}  // namespace loom::test
