// Language-modelling featurizing: masked LM line by line (run_mlm
// line_by_line) and packed (group_texts); causal LM packed (run_clm) and per
// text. Ids are checked against the tokenizer's own output.
#include <gtest/gtest.h>

#include "core/check.h"
#include "feature_test_util.h"
#include "loader_test_util.h"

namespace loom::test {
namespace {

FeaturizeOptions lm_options(Task task, int64_t max_len, bool packing) {
    FeaturizeOptions o;
    o.task = task;
    o.max_seq_length = max_len;
    o.packing = packing;
    return o;
}

const std::vector<std::string> k_texts = {
    "The cat sat on the mat.",
    "",
    "   ",
    "Language models learn from a great deal of text, one token at a time, for a long while.",
    "Short.",
    "Zürich's café serves crème brûlée.",
};

TEST(FeaturizeMlm, LineByLineSkipsBlankLinesAndTruncates) {
    const Tokenizer& tok = bert_tokenizer();
    std::vector<Record> recs;
    for (const auto& t : k_texts) recs.push_back(text_record(t));
    const FeatureSet set = featurize(recs, tok, lm_options(Task::masked_lm, 10, false));
    std::vector<std::string> kept = {k_texts[0], k_texts[3], k_texts[4], k_texts[5]};
    ASSERT_EQ(set.features.size(), kept.size());
    int64_t truncated = 0;
    for (size_t i = 0; i < kept.size(); ++i) {
        const auto want = encode_truncated(tok, kept[i], nullptr, 10);
        EXPECT_EQ(set.features[i].ids, as_i32(want.ids)) << kept[i];
        EXPECT_EQ(set.features[i].ids.front(), 101);
        EXPECT_EQ(set.features[i].ids.back(), 102);
        truncated += tok.encode(kept[i]).size() > 10 ? 1 : 0;
    }
    EXPECT_GT(truncated, 0);
    EXPECT_EQ(set.stats.truncated, truncated);
    EXPECT_EQ(set.stats.skipped, 2);
    EXPECT_EQ(set.task, Task::masked_lm);
}

// group_texts: concatenate every text's tokens (special tokens included) and
// cut into blocks, dropping the tail.
void expect_packed(const Tokenizer& tok, Task task, int64_t block) {
    std::vector<Record> recs;
    std::vector<int32_t> all;
    for (const auto& t : k_texts) {
        recs.push_back(text_record(t));
        const auto e = tok.encode(t);
        all.insert(all.end(), e.ids.begin(), e.ids.end());
    }
    const FeatureSet set = featurize(recs, tok, lm_options(task, block, true));
    const size_t n_blocks = all.size() / size_t(block);
    ASSERT_GT(n_blocks, 1u);
    ASSERT_EQ(set.features.size(), n_blocks);
    for (size_t b = 0; b < n_blocks; ++b) {
        const std::vector<int32_t> want(all.begin() + ptrdiff_t(b * size_t(block)),
                                        all.begin() + ptrdiff_t((b + 1) * size_t(block)));
        EXPECT_EQ(set.features[b].ids, want) << "block " << b;
        EXPECT_EQ(set.features[b].type_ids, std::vector<int32_t>(size_t(block), 0));
    }
    EXPECT_EQ(set.stats.dropped_tokens, int64_t(all.size() % size_t(block)));
    EXPECT_EQ(set.stats.tokens, int64_t(n_blocks) * block);
}

TEST(FeaturizeMlm, PackingConcatenatesAndCutsBlocks) { expect_packed(bert_tokenizer(), Task::masked_lm, 8); }

TEST(FeaturizeClm, PackingConcatenatesAndCutsBlocks) { expect_packed(gpt2_tokenizer(), Task::causal_lm, 7); }

TEST(FeaturizeClm, UnpackedTruncatesAndSkipsEmptyTexts) {
    const Tokenizer& tok = gpt2_tokenizer();
    std::vector<Record> recs;
    for (const auto& t : k_texts) recs.push_back(text_record(t));
    const FeatureSet set = featurize(recs, tok, lm_options(Task::causal_lm, 6, false));
    // Only the empty string gives no GPT-2 token; "   " is a real token.
    ASSERT_EQ(set.features.size(), k_texts.size() - 1);
    size_t f = 0;
    int64_t truncated = 0;
    for (const auto& t : k_texts) {
        if (t.empty()) continue;
        const auto want = encode_truncated(tok, t, nullptr, 6);
        EXPECT_EQ(set.features[f++].ids, as_i32(want.ids)) << t;
        truncated += tok.encode(t).size() > 6 ? 1 : 0;
    }
    EXPECT_EQ(set.stats.skipped, 1);
    EXPECT_GT(truncated, 0);
    EXPECT_EQ(set.stats.truncated, truncated);
}

TEST(FeaturizeClm, TooFewTokensForOneBlockIsAnError) {
    std::vector<Record> recs = {text_record("tiny")};
    expect_error([&] { featurize(recs, gpt2_tokenizer(), lm_options(Task::causal_lm, 1024, true)); },
                 {"causal-lm packing", "1024", "packing: false"});
}

}  // namespace
}  // namespace loom::test
