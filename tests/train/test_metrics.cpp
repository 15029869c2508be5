// Metrics against values worked out by hand from the reference definitions
// (sklearn with zero_division=0; the official SQuAD evaluate script).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/check.h"
#include "train/metrics.h"

namespace loom {
namespace {

TEST(ClassificationMetrics, MacroAveragesByHand) {
    std::vector<int64_t> y_true = {0, 1, 2, 2, 1, 0, 2};
    std::vector<int64_t> y_pred = {0, 2, 2, 2, 0, 0, 1};
    // Label 0: tp 2 (items 0, 5), fp 1 (item 4), fn 0 -> P 2/3, R 1,   F1 4/5
    // Label 1: tp 0, fp 1 (item 6), fn 2 (items 1, 4) -> P 0,  R 0,   F1 0
    // Label 2: tp 2 (items 2, 3), fp 1 (item 1), fn 1 (item 6) -> P 2/3, R 2/3, F1 2/3
    // Accuracy: items 0, 2, 3, 5 are right -> 4/7.
    ClassificationMetrics m = classification_metrics(y_pred, y_true);
    EXPECT_DOUBLE_EQ(m.accuracy, 4.0 / 7.0);
    EXPECT_DOUBLE_EQ(m.precision, (2.0 / 3 + 0 + 2.0 / 3) / 3);  // 4/9
    EXPECT_DOUBLE_EQ(m.recall, (1.0 + 0 + 2.0 / 3) / 3);         // 5/9
    EXPECT_DOUBLE_EQ(m.f1, (0.8 + 0 + 2.0 / 3) / 3);             // 22/45
    EXPECT_EQ(m.labels, (std::vector<int64_t>{0, 1, 2}));
    EXPECT_EQ(m.label_support, (std::vector<int64_t>{2, 2, 3}));
    EXPECT_DOUBLE_EQ(m.label_f1[0], 0.8);
    EXPECT_EQ(m.count, 7);
}

TEST(ClassificationMetrics, LabelsMissingFromOneSideScoreZero) {
    // Label 1 is never predicted, label 3 never true. sklearn averages over
    // the union {0, 1, 3} and scores the undefined ratios 0 (zero_division=0):
    //   0: tp 2, fp 1, fn 0 -> P 2/3, R 1, F1 4/5
    //   1: tp 0, fp 0, fn 2 -> P 0 (0/0), R 0, F1 0
    //   3: tp 0, fp 1, fn 0 -> P 0, R 0 (0/0), F1 0
    ClassificationMetrics m =
        classification_metrics(std::vector<int64_t>{0, 0, 0, 3}, std::vector<int64_t>{0, 0, 1, 1});
    EXPECT_EQ(m.labels, (std::vector<int64_t>{0, 1, 3}));
    EXPECT_DOUBLE_EQ(m.accuracy, 0.5);
    EXPECT_DOUBLE_EQ(m.precision, 2.0 / 9);
    EXPECT_DOUBLE_EQ(m.recall, 1.0 / 3);
    EXPECT_DOUBLE_EQ(m.f1, 4.0 / 15);
}

TEST(ClassificationMetrics, CountersMergeLikeOneBatch) {
    std::vector<int64_t> y_true = {0, 1, 2, 2, 1, 0, 2};
    std::vector<int64_t> y_pred = {0, 2, 2, 2, 0, 0, 1};
    ClassificationCounter a, b;
    a.add(std::span(y_pred).first(3), std::span(y_true).first(3));
    b.add(std::span(y_pred).subspan(3), std::span(y_true).subspan(3));
    a.merge(b);
    ClassificationMetrics merged = a.compute();
    ClassificationMetrics whole = classification_metrics(y_pred, y_true);
    EXPECT_DOUBLE_EQ(merged.f1, whole.f1);
    EXPECT_DOUBLE_EQ(merged.accuracy, whole.accuracy);
    EXPECT_EQ(ClassificationCounter().compute().count, 0);
    EXPECT_THROW(a.add(std::vector<int64_t>{1}, std::vector<int64_t>{1, 2}), loom::Error);
}

// Expected values below follow evaluate-v1.1.py step by step
// (normalize_answer = white_space_fix(remove_articles(remove_punc(lower(s))))).
TEST(SquadMetrics, Normalization) {
    EXPECT_EQ(squad_normalize("the Eiffel Tower!"), "eiffel tower");
    EXPECT_EQ(squad_normalize("in the city of Paris"), "in city of paris");
    // Articles go only as whole words: "another", "theory" stay.
    EXPECT_EQ(squad_normalize("another theory"), "another theory");
    EXPECT_EQ(squad_normalize("An apple, a pear"), "apple pear");
    EXPECT_EQ(squad_normalize("U.S.A."), "usa");  // punctuation is deleted, not spaced
    // Python lowercases non-ASCII letters...
    EXPECT_EQ(squad_normalize("Caf\xc3\xa9 M\xc3\x9cLLER"), "caf\xc3\xa9 m\xc3\xbcller");
    // ...but string.punctuation is ASCII only, so curly quotes stay.
    EXPECT_EQ(squad_normalize("\xe2\x80\x9cParis\xe2\x80\x9d"), "\xe2\x80\x9cparis\xe2\x80\x9d");
    // str.split() splits on Unicode whitespace (tab, no-break space).
    EXPECT_EQ(squad_normalize("  New\tYork\xc2\xa0"
                              "City "),
              "new york city");
    // \b is Unicode-aware: "the" next to an accented letter is part of a word.
    EXPECT_EQ(squad_normalize("th\xc3\xa9 the"), "th\xc3\xa9");
}

TEST(SquadMetrics, ExactMatchAndF1LikeTheOfficialScript) {
    EXPECT_EQ(squad_exact_match("the Eiffel Tower!", {"Eiffel Tower"}), 1.0);
    EXPECT_EQ(squad_f1("the Eiffel Tower!", {"Eiffel Tower"}), 1.0);
    // Max over golds.
    EXPECT_EQ(squad_exact_match("Denver Broncos", {"The Broncos", "The Denver Broncos"}), 1.0);
    // pred [in, city, of, paris] vs gold [paris]: 1 shared, P 1/4, R 1 -> 0.4.
    EXPECT_EQ(squad_exact_match("in the city of Paris", {"Paris"}), 0.0);
    EXPECT_DOUBLE_EQ(squad_f1("in the city of Paris", {"Paris"}), 0.4);
    // [paris, france] vs [paris]: 2/3; vs [france, and, paris]: P 1, R 2/3 -> 0.8.
    EXPECT_DOUBLE_EQ(squad_f1("Paris, France", {"Paris", "France and Paris"}), 0.8);
    // Counter intersection: [cat, cat, cat] & [cat, sat, on, cat] shares 2 cats,
    // P 2/3, R 1/2 -> 2 * (1/3) / (7/6) = 4/7.
    EXPECT_DOUBLE_EQ(squad_f1("the the cat cat cat", {"a cat sat on the cat"}), 4.0 / 7.0);
    EXPECT_DOUBLE_EQ(squad_f1("another theory", {"theory"}), 2.0 / 3.0);
    EXPECT_EQ(squad_f1("\xe2\x80\x9cParis\xe2\x80\x9d", {"Paris"}), 0.0);
}

TEST(SquadMetrics, UnanswerableAndEmptyAnswers) {
    // SQuAD v2.0: no gold answers means the gold is "", and an empty
    // prediction is then fully right.
    EXPECT_EQ(squad_exact_match("", {}), 1.0);
    EXPECT_EQ(squad_f1("", {}), 1.0);
    EXPECT_EQ(squad_f1("Paris", {}), 0.0);
    // Both sides normalise to nothing: EM 1, F1 1 by the v2.0 rule (the v1.1
    // script would give F1 0 here; its data never has such answers).
    EXPECT_EQ(squad_exact_match("A", {"a"}), 1.0);
    EXPECT_EQ(squad_f1("A", {"a"}), 1.0);
}

TEST(SquadMetrics, CounterReportsPercent) {
    SquadCounter c;
    c.add("the Eiffel Tower!", {"Eiffel Tower"});  // EM 1, F1 1
    c.add("in the city of Paris", {"Paris"});      // EM 0, F1 0.4
    SquadCounter d;
    d.add("Paris, France", {"Paris", "France and Paris"});  // EM 0, F1 0.8
    c.merge(d);
    SquadMetrics m = c.compute();
    EXPECT_EQ(m.count, 3);
    EXPECT_DOUBLE_EQ(m.exact_match, 100.0 / 3.0);
    EXPECT_DOUBLE_EQ(m.f1, 100.0 * (1.0 + 0.4 + 0.8) / 3.0);
}

TEST(LanguageModelMetrics, PerplexityAndMaskedAccuracy) {
    EXPECT_DOUBLE_EQ(perplexity(0.0), 1.0);
    EXPECT_DOUBLE_EQ(perplexity(std::log(50.0)), 50.0);
    EXPECT_TRUE(std::isinf(perplexity(1000.0)));  // math.exp raises; HF reports inf
    std::vector<int64_t> labels = {-100, 5, 7, -100, 7, 2};
    std::vector<int64_t> preds = {9, 5, 1, 9, 7, 3};
    // Counted positions 1, 2, 4, 5; right at 1 and 4.
    TokenAccuracy a = masked_token_accuracy(preds, labels);
    EXPECT_EQ(a.total, 4);
    EXPECT_EQ(a.correct, 2);
    EXPECT_DOUBLE_EQ(a.accuracy(), 0.5);
    EXPECT_EQ(TokenAccuracy{}.accuracy(), 0.0);
}

TEST(LanguageModelMetrics, ArgmaxTakesTheFirstMaximum) {
    std::vector<float> logits = {0.1f, 0.7f, 0.7f,  // tie: index 1
                                 -3.f, -2.f, -9.f,  // 1
                                 5.f,  1.f,  4.f};  // 0
    EXPECT_EQ(argmax_rows(logits, 3, 3), (std::vector<int64_t>{1, 1, 0}));
    EXPECT_THROW(argmax_rows(logits, 2, 3), loom::Error);
}

}  // namespace
}  // namespace loom
