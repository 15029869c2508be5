// Causal-LM instruction data (prompt, completion) through the JSONL reader,
// the featurizer and the collator, with the real Mistral 7B tokenizer and the
// Llama-3-style one. Every expected id is Hugging Face tokenizers' own output
// for the joined text (the cases in tests/data/tokenizers/*/cases.json:
// "Hello, world!", "The quick brown fox ...", "aaaa... !!!"), plus the end
// token; labels are -100 on the start token and the prompt.
#include <gtest/gtest.h>

#include "data/features.h"
#include "data/loader.h"
#include "feature_test_util.h"
#include "loader_test_util.h"

namespace loom::test {
namespace {

const Tokenizer& mistral_tokenizer() {
    static const Tokenizer tok = Tokenizer::from_file(std::string(LOOM_TEST_DATA_DIR) +
                                                      "/tokenizers/mistral-7b/tokenizer.json");
    return tok;
}

const Tokenizer& llama3_style_tokenizer() {
    static const Tokenizer tok = Tokenizer::from_file(std::string(LOOM_TEST_DATA_DIR) +
                                                      "/tokenizers/llama3-style/tokenizer.json");
    return tok;
}

constexpr int32_t X = -100;

class FeaturizeInstruct : public DataDir {
  protected:
    std::vector<Record> read(const std::string& jsonl) {
        ReadOptions ro;
        ro.kind = RecordKind::prompt_completion;
        ro.text_column = "prompt";
        ro.text_pair_column = "completion";
        return read_records(write("sft.jsonl", jsonl), ro);
    }
    static FeaturizeOptions options(int64_t eos, int64_t max_len = 64, bool packing = false) {
        FeaturizeOptions o;
        o.task = Task::causal_lm;
        o.max_seq_length = max_len;
        o.packing = packing;
        o.eos_id = eos;
        return o;
    }
};

const char* k_jsonl =
    "{\"prompt\": \"Hello,\", \"completion\": \" world!\"}\n"
    "{\"prompt\": \"The quick brown fox\", \"completion\": \" jumps over the lazy dog.\"}\n"
    "{\"prompt\": \"aaaaaaaaaaaa\", \"completion\": \"aaaaaaaaaaaa !!!!!!!!!! ---------- "
    "........\"}\n";

TEST_F(FeaturizeInstruct, MistralBosPromptCompletionEos) {
    const FeatureSet set = featurize(read(k_jsonl), mistral_tokenizer(), options(2));
    ASSERT_EQ(set.features.size(), 3u);
    // <s> ▁Hello , | ▁world ! </s>
    EXPECT_EQ(set.features[0].ids, (std::vector<int32_t>{1, 22557, 28725, 1526, 28808, 2}));
    EXPECT_EQ(set.features[0].labels, (std::vector<int32_t>{X, X, X, 1526, 28808, 2}));
    // <s> ▁The ▁quick ▁brown ▁f ox | ▁j umps ▁over ▁the ▁lazy ▁dog . </s>
    EXPECT_EQ(set.features[1].ids, (std::vector<int32_t>{1, 415, 2936, 9060, 285, 1142, 461, 10575,
                                                         754, 272, 17898, 3914, 28723, 2}));
    EXPECT_EQ(set.features[1].labels, (std::vector<int32_t>{X, X, X, X, X, X, 461, 10575, 754, 272,
                                                            17898, 3914, 28723, 2}));
    // <s> ▁a aaaaaaaa aaaaaaaa(bytes 9..17 cross the prompt's end at 12) | aaaa aa a ...
    EXPECT_EQ(set.features[2].ids,
              (std::vector<int32_t>{1, 264, 25332, 25332, 12648, 4474, 28708, 918, 19010, 3946,
                                    13915, 28705, 16417, 28705, 10522, 2}));
    EXPECT_EQ(set.features[2].labels,
              (std::vector<int32_t>{X, X, X, X, 12648, 4474, 28708, 918, 19010, 3946, 13915, 28705,
                                    16417, 28705, 10522, 2}));
    EXPECT_EQ(set.stats.boundary_tokens, 1);
    for (const Feature& f : set.features)
        EXPECT_EQ(f.type_ids, std::vector<int32_t>(f.ids.size(), 0));
}

TEST_F(FeaturizeInstruct, Llama3StyleHasNoStartTokenAndEndsWithEndoftext) {
    const FeatureSet set = featurize(read(k_jsonl), llama3_style_tokenizer(), options(50256));
    ASSERT_EQ(set.features.size(), 3u);
    EXPECT_EQ(set.features[0].ids, (std::vector<int32_t>{15496, 11, 995, 0, 50256}));
    EXPECT_EQ(set.features[0].labels, (std::vector<int32_t>{X, X, 995, 0, 50256}));
    EXPECT_EQ(set.features[1].ids, (std::vector<int32_t>{464, 2068, 7586, 21831, 18045, 625, 262,
                                                         16931, 3290, 13, 50256}));
    EXPECT_EQ(set.features[1].labels,
              (std::vector<int32_t>{X, X, X, X, 18045, 625, 262, 16931, 3290, 13, 50256}));
    // 24 a are six "aaaa": the prompt's 12 are exactly three, no token crosses.
    EXPECT_EQ(set.features[2].labels[2], X);
    EXPECT_EQ(set.features[2].labels[3], 24794);
    EXPECT_EQ(set.stats.boundary_tokens, 0);
}

// The collated batch: labels -100 on the prompt and on padding, pad = eos,
// and label_count counts completion tokens and the end token only.
TEST_F(FeaturizeInstruct, BatchMasksPromptAndPadding) {
    auto set =
        std::make_shared<FeatureSet>(featurize(read(k_jsonl), mistral_tokenizer(), options(2)));
    LoaderOptions lo;
    lo.batch_size = 2;
    lo.shuffle = false;
    lo.pad_id = 2;
    Loader loader(set, lo);
    TokenBatch b;
    ASSERT_TRUE(loader.next(b));
    ASSERT_EQ(b.T, 14);
    const std::vector<int64_t> row0_labels = {X, X, X, 1526, 28808, 2, X, X, X, X, X, X, X, X};
    EXPECT_EQ(std::vector<int64_t>(b.labels.begin(), b.labels.begin() + 14), row0_labels);
    EXPECT_EQ(std::vector<int64_t>(b.input_ids.begin() + 6, b.input_ids.begin() + 14),
              std::vector<int64_t>(8, 2));
    EXPECT_EQ(b.attention_mask[5], 1);
    EXPECT_EQ(b.attention_mask[6], 0);
    EXPECT_EQ(b.label_count, 3 + 8);
}

TEST_F(FeaturizeInstruct, TruncationKeepsThePrefixAndSkipsRowsWithoutTarget) {
    // max 4: row 0 keeps <s> ▁Hello , ▁world (one target), row 1 only prompt: skipped.
    const FeatureSet set = featurize(read(k_jsonl), mistral_tokenizer(), options(2, 4));
    ASSERT_EQ(set.features.size(), 1u);
    EXPECT_EQ(set.features[0].ids, (std::vector<int32_t>{1, 22557, 28725, 1526}));
    EXPECT_EQ(set.features[0].labels, (std::vector<int32_t>{X, X, X, 1526}));
    EXPECT_EQ(set.stats.truncated, 3);
    EXPECT_EQ(set.stats.skipped, 2);
}

TEST_F(FeaturizeInstruct, PackingCarriesTheLabels) {
    const FeatureSet set = featurize(read(k_jsonl), mistral_tokenizer(), options(2, 10, true));
    // 6 + 14 + 16 = 36 tokens: 3 blocks of 10, 6 dropped.
    ASSERT_EQ(set.features.size(), 3u);
    EXPECT_EQ(set.features[0].ids,
              (std::vector<int32_t>{1, 22557, 28725, 1526, 28808, 2, 1, 415, 2936, 9060}));
    EXPECT_EQ(set.features[0].labels, (std::vector<int32_t>{X, X, X, 1526, 28808, 2, X, X, X, X}));
    EXPECT_EQ(set.stats.dropped_tokens, 6);
}

// Plain causal-LM text (run_clm): the tokenizer's post-processor decides the
// start token (Mistral's TemplateProcessing: <s>; Llama-3-style: none), and no
// end token is added, as tokenizer(text) gives them to run_clm.
TEST_F(FeaturizeInstruct, PlainTextTakesStartTokensFromThePostProcessor) {
    FeaturizeOptions o = options(2);
    const std::vector<Record> recs = {text_record("Hello, world!")};
    EXPECT_EQ(featurize(recs, mistral_tokenizer(), o).features.at(0).ids,
              (std::vector<int32_t>{1, 22557, 28725, 1526, 28808}));
    const FeatureSet l3 = featurize(recs, llama3_style_tokenizer(), o);
    EXPECT_EQ(l3.features.at(0).ids, (std::vector<int32_t>{15496, 11, 995, 0}));
    EXPECT_TRUE(l3.features.at(0).labels.empty());  // every token is its own label
}

// Packing with document boundaries: positions restart at each document (and
// at each block, for a document cut by it), whose first token is no target.
TEST_F(FeaturizeInstruct, PackedDocumentsRestartPositions) {
    const std::vector<Record> recs = {text_record("Hello, world!"),
                                      text_record("The quick brown fox jumps over the lazy dog.")};
    FeaturizeOptions o = options(2, 8, true);
    o.pack_documents = true;
    const FeatureSet set = featurize(recs, mistral_tokenizer(), o);
    // 5 + 13 = 18 tokens: 2 blocks of 8, 2 dropped.
    ASSERT_EQ(set.features.size(), 2u);
    EXPECT_EQ(set.features[0].ids,
              (std::vector<int32_t>{1, 22557, 28725, 1526, 28808, 1, 415, 2936}));
    EXPECT_EQ(set.features[0].position_ids, (std::vector<int32_t>{0, 1, 2, 3, 4, 0, 1, 2}));
    EXPECT_EQ(set.features[0].labels,
              (std::vector<int32_t>{X, 22557, 28725, 1526, 28808, X, 415, 2936}));
    EXPECT_EQ(set.features[1].ids,
              (std::vector<int32_t>{9060, 285, 1142, 461, 10575, 754, 272, 17898}));
    EXPECT_EQ(set.features[1].position_ids, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(set.features[1].labels.front(), X);
    // Without the option: group_texts, no positions, every token a label.
    o.pack_documents = false;
    const FeatureSet plain = featurize(recs, mistral_tokenizer(), o);
    EXPECT_TRUE(plain.features[0].position_ids.empty());
    EXPECT_TRUE(plain.features[0].labels.empty());
}

TEST_F(FeaturizeInstruct, MissingEosIsAnError) {
    auto recs = read(k_jsonl);
    expect_error([&] { featurize(recs, mistral_tokenizer(), options(-1)); },
                 {"instruction data", "eos_token_id"});
}

TEST_F(FeaturizeInstruct, ChatMessagesAreRefusedWithAReason) {
    expect_error([&] { read("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n"); },
                 {"sft.jsonl:1", "column 'prompt' not found", "chat template"});
}

}  // namespace
}  // namespace loom::test
