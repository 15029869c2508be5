// Sequence-classification featurizing (run_glue): ids equal to what the
// tokenizer gives with LongestFirst truncation, truncation counted, labels
// mapped by name / integer / inferred order, unknown labels reported.
#include <gtest/gtest.h>

#include "core/check.h"
#include "feature_test_util.h"
#include "loader_test_util.h"

namespace loom::test {
namespace {

FeaturizeOptions cls_options(int64_t max_len) {
    FeaturizeOptions o;
    o.task = Task::sequence_classification;
    o.max_seq_length = max_len;
    return o;
}

TEST(FeaturizeSeqCls, IdsMatchTokenizerAndTruncationIsCounted) {
    const Tokenizer& tok = bert_tokenizer();
    std::vector<Record> recs = {
        cls_record("A short sentence.", "pos", 1),
        cls_record("This sentence is definitely much longer than twelve tokens, so it gets cut.", "neg", 2),
        cls_record("Pair first half", "pos", 3),
    };
    recs[2].has_pair = true;
    recs[2].text_pair = "and a second segment that is rather long and will need truncation too";
    const FeatureSet set = featurize(recs, tok, cls_options(12));
    ASSERT_EQ(set.features.size(), 3u);
    for (size_t i = 0; i < recs.size(); ++i) {
        const std::string* pair = recs[i].has_pair ? &recs[i].text_pair : nullptr;
        const auto want = encode_truncated(tok, recs[i].text, pair, 12);
        EXPECT_EQ(set.features[i].ids, as_i32(want.ids)) << "record " << i;
        EXPECT_EQ(set.features[i].type_ids, as_i32(want.type_ids)) << "record " << i;
        EXPECT_LE(set.features[i].ids.size(), 12u);
    }
    // The pair keeps both segments ([SEP] between, type 1 after it).
    EXPECT_EQ(set.features[2].type_ids.back(), 1);
    EXPECT_EQ(set.features[2].ids.front(), 101);  // [CLS]
    EXPECT_EQ(set.stats.records, 3);
    EXPECT_EQ(set.stats.truncated, 2);
    int64_t tokens = 0;
    for (const auto& f : set.features) tokens += int64_t(f.ids.size());
    EXPECT_EQ(set.stats.tokens, tokens);
    EXPECT_EQ(set.task, Task::sequence_classification);
}

TEST(FeaturizeSeqCls, TextLabelsGetSortedNamesWhenNoneGiven) {
    std::vector<Record> recs = {cls_record("a", "positive"), cls_record("b", "negative"),
                                cls_record("c", "neutral"), cls_record("d", "negative")};
    const FeatureSet set = featurize(recs, bert_tokenizer(), cls_options(16));
    EXPECT_EQ(set.label_names, (std::vector<std::string>{"negative", "neutral", "positive"}));
    std::vector<int64_t> labels;
    for (const auto& f : set.features) labels.push_back(f.label);
    EXPECT_EQ(labels, (std::vector<int64_t>{2, 0, 1, 0}));
}

TEST(FeaturizeSeqCls, GivenNamesFixTheOrderAndIntegersMapDirectly) {
    FeaturizeOptions o = cls_options(16);
    o.label_names = {"positive", "negative"};
    std::vector<Record> recs = {cls_record("a", "negative"), cls_record("b", "positive"),
                                cls_record_int("c", 1)};
    const FeatureSet set = featurize(recs, bert_tokenizer(), o);
    EXPECT_EQ(set.label_names, o.label_names);
    EXPECT_EQ(set.features[0].label, 1);
    EXPECT_EQ(set.features[1].label, 0);
    EXPECT_EQ(set.features[2].label, 1);  // an integer that is not a name: the index itself

    // Integer labels without names are used as they are.
    std::vector<Record> ints = {cls_record_int("a", 3), cls_record_int("b", 0)};
    const FeatureSet s2 = featurize(ints, bert_tokenizer(), cls_options(16));
    EXPECT_TRUE(s2.label_names.empty());
    EXPECT_EQ(s2.features[0].label, 3);
    EXPECT_EQ(s2.features[1].label, 0);

    // Names that are numbers match by name first.
    FeaturizeOptions o3 = cls_options(16);
    o3.label_names = {"1", "0"};
    std::vector<Record> bits = {cls_record_int("a", 1), cls_record_int("b", 0)};
    const FeatureSet s3 = featurize(bits, bert_tokenizer(), o3);
    EXPECT_EQ(s3.features[0].label, 0);  // "1" is at index 0
    EXPECT_EQ(s3.features[1].label, 1);
}

TEST(FeaturizeSeqCls, UnknownLabelNamesTheRecordTheLabelAndTheKnownLabels) {
    FeaturizeOptions o = cls_options(16);
    o.label_names = {"positive", "negative"};
    o.files = {"/data/train.csv"};
    std::vector<Record> recs = {cls_record("a", "negative", 2), cls_record("b", "mixed", 7)};
    expect_error([&] { featurize(recs, bert_tokenizer(), o); },
                 {"/data/train.csv:7", "'mixed'", "'positive'", "'negative'"});
    // An integer outside the names, too.
    std::vector<Record> ints = {cls_record_int("c", 5, 3)};
    expect_error([&] { featurize(ints, bert_tokenizer(), o); }, {"train.csv:3", "'5'"});
    // Mixed integer and text labels cannot be ordered.
    std::vector<Record> mixed = {cls_record_int("c", 1, 3), cls_record("d", "x", 4)};
    expect_error([&] { featurize(mixed, bert_tokenizer(), cls_options(16)); }, {"mix", "file #0:3"});
}

TEST(FeaturizeSeqCls, RecordsWithoutLabelAreUnlabelled) {
    std::vector<Record> recs = {text_record("no label here")};
    const FeatureSet set = featurize(recs, bert_tokenizer(), cls_options(16));
    EXPECT_EQ(set.features[0].label, -100);
}

}  // namespace
}  // namespace loom::test
