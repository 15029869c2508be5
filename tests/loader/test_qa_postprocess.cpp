// Answer extraction against Hugging Face's postprocess_qa_predictions on the
// reference logits (SQuAD v1 and v2 rules), and recovery of a known answer
// from logits peaked at its tokens when it sits in the second of two windows.
#include <gtest/gtest.h>

#include <random>

#include "data/qa_postprocess.h"
#include "qa_fixture.h"

namespace loom::test {
namespace {

using nlohmann::json;

QaLogits reference_logits() {
    const json& ref = qa_reference();
    QaLogits l(qa_features().features.size());
    for (size_t i = 0; i < l.start.size(); ++i) {
        l.start[i] = ref.at("start_logits")[i].get<std::vector<float>>();
        l.end[i] = ref.at("end_logits")[i].get<std::vector<float>>();
    }
    return l;
}

TEST(QaPostprocess, MatchesHuggingFaceV1) {
    const json& ref = qa_reference();
    QaPostprocessOptions o;
    o.n_best_size = ref.at("n_best_size");
    o.max_answer_length = ref.at("max_answer_length");
    const auto preds = qa_postprocess(qa_features(), reference_logits(), o);
    const json& want = ref.at("predictions_v1");
    ASSERT_EQ(preds.size(), want.size());
    for (const auto& p : preds) {
        ASSERT_TRUE(want.contains(p.id)) << p.id;
        EXPECT_EQ(p.text, want.at(p.id).get<std::string>()) << p.id;
        const Record& ex = qa_features().examples[size_t(&p - preds.data())];
        EXPECT_EQ(ex.id, p.id);
        ASSERT_GE(p.start_byte, 0);
        EXPECT_EQ(ex.context.substr(size_t(p.start_byte), size_t(p.end_byte - p.start_byte)), p.text);
    }
}

TEST(QaPostprocess, MatchesHuggingFaceV2WithNullAnswers) {
    const json& ref = qa_reference();
    QaPostprocessOptions o;
    o.n_best_size = ref.at("n_best_size");
    o.max_answer_length = ref.at("max_answer_length");
    o.version_2_with_negative = true;
    o.null_score_diff_threshold = ref.at("null_score_diff_threshold_v2");
    const auto preds = qa_postprocess(qa_features(), reference_logits(), o);
    const json& want = ref.at("predictions_v2");
    const json& diffs = ref.at("null_score_diff_v2");
    int nulls = 0;
    for (const auto& p : preds) {
        EXPECT_EQ(p.text, want.at(p.id).get<std::string>()) << p.id;
        EXPECT_EQ(float(p.null_score_diff), diffs.at(p.id).get<float>()) << p.id;
        nulls += p.text.empty();
    }
    EXPECT_GT(nulls, 0);
    EXPECT_LT(nulls, int(preds.size()));
}

TEST(QaPostprocess, RecoversThePeakedAnswerAcrossTwoWindows) {
    Record r;
    r.id = "treasure";
    r.question = "Where is the treasure?";
    r.context =
        "One two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty. The treasure is buried under the old oak tree.";
    const std::string answer = "under the old oak tree";
    r.answers.push_back({answer, 0, int64_t(r.context.find(answer))});
    FeaturizeOptions fo;
    fo.task = Task::question_answering;
    fo.max_seq_length = 32;
    fo.doc_stride = 8;
    const FeatureSet set = featurize({r}, bert_tokenizer(), fo);
    ASSERT_EQ(set.features.size(), 2u);
    ASSERT_EQ(set.features[0].start_position, 0);  // only the second window holds the answer
    ASSERT_GT(set.features[1].start_position, 0);

    // Batch the two windows padded to a common T, as evaluation would.
    const int64_t T = 40;
    std::mt19937 rng(7);
    std::normal_distribution<float> noise(0.0f, 1.0f);
    std::vector<float> start(size_t(2 * T)), end(size_t(2 * T));
    for (auto& x : start) x = noise(rng);
    for (auto& x : end) x = noise(rng);
    const Feature& f1 = set.features[1];
    start[size_t(T + f1.start_position)] = 9.0f;
    end[size_t(T + f1.end_position)] = 9.0f;
    // A strong decoy in the first window that runs longer than max_answer_length.
    start[2] = 8.5f;
    end[size_t(T - 1)] = 8.5f;
    QaLogits logits(set.features.size());
    logits.store({0, 1}, T, start.data(), end.data());

    QaPostprocessOptions o;
    o.max_answer_length = 10;
    const auto preds = qa_postprocess(set, logits, o);
    ASSERT_EQ(preds.size(), 1u);
    EXPECT_EQ(preds[0].id, "treasure");
    EXPECT_EQ(preds[0].text, answer);
    EXPECT_EQ(preds[0].start_byte, int64_t(r.context.find(answer)));
    EXPECT_FLOAT_EQ(float(preds[0].score), 18.0f);

    // With v2 and a dominant null score in every window, the answer is "".
    QaLogits null_logits = logits;
    for (size_t w = 0; w < 2; ++w) null_logits.start[w][0] = null_logits.end[w][0] = 20.0f;
    o.version_2_with_negative = true;
    const auto p2 = qa_postprocess(set, null_logits, o);
    EXPECT_EQ(p2[0].text, "");
    EXPECT_GT(p2[0].null_score_diff, 0.0);
    // ... but HF takes the lowest null score over the windows: one window
    // with a low null score is enough to keep the answer.
    null_logits.start[1][0] = -20.0f;
    const auto p3 = qa_postprocess(set, null_logits, o);
    EXPECT_EQ(p3[0].text, answer);
}

TEST(QaPostprocess, FeaturesWithoutLogitsAreSkipped) {
    const FeatureSet& set = qa_features();
    QaLogits l(set.features.size());  // nothing evaluated
    const auto preds = qa_postprocess(set, l, {});
    for (const auto& p : preds) EXPECT_EQ(p.text, "empty");  // HF's placeholder
}

}  // namespace
}  // namespace loom::test
