// Question-answering featurizing against Hugging Face: the windows
// (tokenizers with only_second truncation, stride and overflow) and run_qa's
// start/end labels (tests/data/qa_windows), plus checks that the labelled
// tokens decode to the answer.
#include <gtest/gtest.h>

#include "core/check.h"
#include "loader_test_util.h"
#include "qa_fixture.h"

namespace loom::test {
namespace {

using nlohmann::json;

TEST(FeaturizeQa, WindowsMatchHuggingFace) {
    const json& ref = qa_reference();
    const FeatureSet& set = qa_features();
    const json& want = ref.at("features");
    ASSERT_EQ(set.features.size(), want.size());
    EXPECT_EQ(set.task, Task::question_answering);
    for (size_t i = 0; i < want.size(); ++i) {
        const Feature& f = set.features[i];
        const json& w = want[i];
        SCOPED_TRACE("feature " + std::to_string(i) + " (" + w.at("example_id").get<std::string>() + ")");
        EXPECT_EQ(f.example_index, w.at("example_index").get<int64_t>());
        EXPECT_EQ(f.ids, w.at("input_ids").get<std::vector<int32_t>>());
        EXPECT_EQ(f.type_ids, w.at("token_type_ids").get<std::vector<int32_t>>());
        const auto seq = w.at("sequence_ids").get<std::vector<int64_t>>();
        const auto offs = w.at("offsets_chars").get<std::vector<std::pair<int64_t, int64_t>>>();
        ASSERT_EQ(f.offsets.size(), seq.size());
        const std::string& ctx = set.examples[size_t(f.example_index)].context;
        for (size_t t = 0; t < seq.size(); ++t) {
            if (seq[t] != 1) {
                EXPECT_EQ(f.offsets[t], std::make_pair(-1, -1)) << "token " << t;
                continue;
            }
            EXPECT_EQ(chars_before(ctx, f.offsets[t].first), offs[t].first) << "token " << t;
            EXPECT_EQ(chars_before(ctx, f.offsets[t].second), offs[t].second) << "token " << t;
        }
    }
    // Every example got at least one window, long ones several.
    EXPECT_GT(set.stats.truncated, 0);
    EXPECT_EQ(set.stats.records, int64_t(set.examples.size()));
}

TEST(FeaturizeQa, PositionsMatchRunQa) {
    const json& want = qa_reference().at("features");
    const FeatureSet& set = qa_features();
    int walked_past = 0, answered = 0, outside = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        const Feature& f = set.features[i];
        const int64_t hs = want[i].at("start_position"), he = want[i].at("end_position");
        SCOPED_TRACE("feature " + std::to_string(i) + " (" + want[i].at("example_id").get<std::string>() + ")");
        if (hs > he) {
            // run_qa's walk ran past the last context token into [SEP]; Loom
            // labels that last context token (which is the whole answer).
            ++walked_past;
            EXPECT_EQ(hs, he + 1);
            EXPECT_EQ(f.start_position, he);
            EXPECT_EQ(f.end_position, he);
            EXPECT_EQ(f.offsets[size_t(he + 1)], std::make_pair(-1, -1));  // [SEP]
            continue;
        }
        EXPECT_EQ(f.start_position, hs);
        EXPECT_EQ(f.end_position, he);
        (hs == 0 ? outside : answered)++;
    }
    EXPECT_EQ(walked_past, 2);  // danube-8 and danube-9
    EXPECT_GT(answered, 10);
    EXPECT_GT(outside, 10);
}

TEST(FeaturizeQa, LabelledTokensDecodeToTheAnswer) {
    const Tokenizer& tok = bert_tokenizer();
    const FeatureSet& set = qa_features();
    int checked = 0;
    for (const Feature& f : set.features) {
        const Record& ex = set.examples[size_t(f.example_index)];
        if (f.start_position == 0) {
            EXPECT_EQ(f.end_position, 0);
            continue;
        }
        ASSERT_FALSE(ex.answers.empty());
        ASSERT_LE(f.start_position, f.end_position);
        std::vector<uint32_t> span(f.ids.begin() + f.start_position, f.ids.begin() + f.end_position + 1);
        const auto answer = tok.encode(ex.answers[0].text, false);
        EXPECT_EQ(tok.decode(span, true), tok.decode(answer.ids, true)) << ex.id;
        // And the byte span of those tokens is the answer's text.
        const auto b = f.offsets[size_t(f.start_position)].first;
        const auto e = f.offsets[size_t(f.end_position)].second;
        EXPECT_EQ(ex.context.substr(size_t(b), size_t(e - b)), ex.answers[0].text) << ex.id;
        ++checked;
    }
    EXPECT_GT(checked, 10);
}

TEST(FeaturizeQa, WindowWithoutTheAnswerAndUnanswerableQuestionsGetCls) {
    Record r;
    r.id = "q1";
    r.question = "Where is the treasure?";
    r.context =
        "One two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty. The treasure is buried under the old oak tree.";
    const std::string answer = "under the old oak tree";
    r.answers.push_back({answer, 0, int64_t(r.context.find(answer))});
    Record none = r;
    none.id = "q2";
    none.answers.clear();
    none.is_impossible = true;
    FeaturizeOptions o;
    o.task = Task::question_answering;
    o.max_seq_length = 24;
    o.doc_stride = 4;
    const FeatureSet set = featurize({r, none}, bert_tokenizer(), o);
    int with = 0, without = 0;
    for (const Feature& f : set.features) {
        if (f.example_index == 1) {
            EXPECT_EQ(f.start_position, 0);
            EXPECT_EQ(f.end_position, 0);
            continue;
        }
        (f.start_position > 0 ? with : without)++;
        if (f.start_position > 0) {
            std::vector<uint32_t> span(f.ids.begin() + f.start_position, f.ids.begin() + f.end_position + 1);
            EXPECT_EQ(bert_tokenizer().decode(span, true), answer);
        } else {
            EXPECT_EQ(f.end_position, 0);
        }
        EXPECT_LE(f.ids.size(), 24u);
    }
    EXPECT_GE(with, 1);
    EXPECT_GE(without, 2);  // the first windows only hold the numbers
    EXPECT_EQ(set.examples.size(), 2u);
}

TEST(FeaturizeQa, StrideMustBeBelowMaxLength) {
    Record r;
    r.question = "q";
    r.context = "c";
    FeaturizeOptions o;
    o.task = Task::question_answering;
    o.max_seq_length = 16;
    o.doc_stride = 16;
    expect_error([&] { featurize({r}, bert_tokenizer(), o); }, {"doc_stride 16", "max_seq_length 16"});
}

}  // namespace
}  // namespace loom::test
