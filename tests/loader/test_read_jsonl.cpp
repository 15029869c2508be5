// JSONL reader: records, line numbers, every bad-input case.
#include <gtest/gtest.h>

#include "data/record.h"
#include "loader_test_util.h"

namespace loom {
namespace {

using test::classification_options;
using test::expect_error;

class ReadJsonl : public test::DataDir {};

TEST_F(ReadJsonl, ClassificationRecordsWithLines) {
    std::string p = write("train.jsonl",
                          "{\"text\": \"good film\", \"label\": 1}\n"
                          "\n"
                          "{\"label\": \"neg\", \"text\": \"bad \\u00e9 film\", \"extra\": [1, 2]}\r\n"
                          "   \n"
                          "{\"text\": \"ok\", \"label\": -3}");  // no final newline
    auto reader = open_records(p, classification_options());
    Record r;
    ASSERT_TRUE(reader->next(r));
    EXPECT_EQ(r.text, "good film");
    EXPECT_EQ(r.label.kind, Label::Kind::integer);
    EXPECT_EQ(r.label.id, 1);
    EXPECT_EQ(r.line, 1);
    EXPECT_EQ(r.index, 0);
    ASSERT_TRUE(reader->next(r));
    EXPECT_EQ(r.text, "bad \xc3\xa9 film");  // the \u escape decoded to UTF-8
    EXPECT_EQ(r.label.kind, Label::Kind::text);
    EXPECT_EQ(r.label.name, "neg");
    EXPECT_EQ(r.line, 3);
    EXPECT_EQ(reader->origin(r), p + ":3");
    ASSERT_TRUE(reader->next(r));
    EXPECT_EQ(r.label.id, -3);
    EXPECT_EQ(r.line, 5);
    EXPECT_FALSE(reader->next(r));
    EXPECT_EQ(reader->report().records, 3);
    EXPECT_EQ(reader->report().bad_lines, 0);
}

TEST_F(ReadJsonl, TextPairAndByteOrderMark) {
    std::string p = write("pairs.jsonl",
                          "\xEF\xBB\xBF{\"premise\": \"a\", \"hypothesis\": \"b\", \"label\": 0}\n");
    ReadOptions o = classification_options();
    o.text_column = "premise";
    o.text_pair_column = "hypothesis";
    auto rs = read_records(p, o);
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].text, "a");
    EXPECT_TRUE(rs[0].has_pair);
    EXPECT_EQ(rs[0].text_pair, "b");
}

TEST_F(ReadJsonl, MalformedLineIsAnErrorNamingFileAndLine) {
    std::string p = write("bad.jsonl",
                          "{\"text\": \"a\", \"label\": 0}\n"
                          "{\"text\": \"b\", \"label\": 1}\n"
                          "{\"text\": \"c\", \"label\": }\n"
                          "{\"text\": \"d\", \"label\": 1}\n");
    expect_error([&] { read_records(p, classification_options()); },
                 {p + ":3:", "malformed JSON", "skip_bad_lines"});
}

TEST_F(ReadJsonl, SkipBadLinesCountsAndReportsThem) {
    std::string p = write("bad.jsonl",
                          "{\"text\": \"a\", \"label\": 0}\n"
                          "not json at all\n"
                          "[1, 2, 3]\n"
                          "{\"text\": 42, \"label\": 1}\n"
                          "{\"text\": \"e\", \"label\": 2.5}\n"
                          "{\"text\": \"f\", \"label\": null}\n"
                          "{\"text\": \"g\", \"label\": 1}\n");
    ReadOptions o = classification_options();
    o.skip_bad_lines = true;
    ReadReport report;
    auto rs = read_records(p, o, &report);
    ASSERT_EQ(rs.size(), 2u);
    EXPECT_EQ(rs[0].text, "a");
    EXPECT_EQ(rs[1].text, "g");
    EXPECT_EQ(rs[1].line, 7);
    EXPECT_EQ(report.records, 2);
    EXPECT_EQ(report.bad_lines, 5);
    ASSERT_EQ(report.bad_examples.size(), 5u);
    EXPECT_NE(report.bad_examples[0].find(p + ":2: malformed JSON"), std::string::npos)
        << report.bad_examples[0];
    EXPECT_NE(report.bad_examples[1].find(":3: expected a JSON object, got array"),
              std::string::npos);
    EXPECT_NE(report.bad_examples[2].find(":4: column 'text' must be a string, got number"),
              std::string::npos);
    EXPECT_NE(report.bad_examples[3].find(":5: label column 'label' must be an integer or a string"),
              std::string::npos);
    EXPECT_NE(report.bad_examples[4].find(":6:"), std::string::npos);
}

TEST_F(ReadJsonl, MissingColumnNamesFileLineColumnAndPresentColumns) {
    std::string p = write("cols.jsonl",
                          "{\"sentence\": \"a\", \"label\": 0}\n");
    expect_error([&] { read_records(p, classification_options()); },
                 {p + ":1:", "column 'text' not found", "columns present: sentence, label"});
    // A missing column is not a "bad line": skipping does not hide it.
    ReadOptions o = classification_options();
    o.skip_bad_lines = true;
    std::string q = write("cols2.jsonl",
                          "{\"text\": \"a\", \"label\": 0}\n{\"text\": \"b\"}\n");
    expect_error([&] { read_records(q, o); },
                 {q + ":2:", "column 'label' not found", "columns present: text"});
}

TEST_F(ReadJsonl, LabelMapAppliedAndUnknownLabelsRejected) {
    std::string p = write("stars.jsonl",
                          "{\"text\": \"a\", \"label\": 1}\n"
                          "{\"text\": \"b\", \"label\": \"3\"}\n"
                          "{\"text\": \"c\", \"label\": 5}\n");
    ReadOptions o = classification_options();
    o.label_map = {{"1", "negative"}, {"2", "negative"}, {"3", "neutral"}, {"4", "positive"},
                   {"5", "positive"}};
    auto rs = read_records(p, o);
    ASSERT_EQ(rs.size(), 3u);
    EXPECT_EQ(rs[0].label.name, "negative");
    EXPECT_EQ(rs[0].label.kind, Label::Kind::text);
    EXPECT_EQ(rs[1].label.name, "neutral");  // "3" and 3 are the same raw label
    EXPECT_EQ(rs[2].label.name, "positive");

    std::string q = write("stars6.jsonl",
                          "{\"text\": \"a\", \"label\": 1}\n{\"text\": \"b\", \"label\": 6}\n");
    expect_error([&] { read_records(q, o); },
                 {q + ":2:", "label '6' is not in label_map", "keys: 1, 2, 3, 4, 5"});
}

TEST_F(ReadJsonl, EmptyDatasetIsAClearError) {
    std::string p = write("empty.jsonl", "");
    expect_error([&] { read_records(p, classification_options()); },
                 {"empty dataset", "no records in '" + p + "'"});
    std::string q = write("blank.jsonl", "\n  \n\n");
    expect_error([&] { read_records(q, classification_options()); }, {"empty dataset"});
    // Everything skipped: the message says why.
    std::string b = write("allbad.jsonl", "{oops\n{\"text\": 1, \"label\": 0}\n");
    ReadOptions o = classification_options();
    o.skip_bad_lines = true;
    expect_error([&] { read_records(b, o); },
                 {"empty dataset", "all 2 lines were bad and skipped", b + ":1: malformed JSON"});
}

TEST_F(ReadJsonl, LanguageModelTextOnly) {
    std::string p = write("lm.jsonl", "{\"content\": \"one\"}\n{\"content\": \"two\", \"x\": 1}\n");
    ReadOptions o;
    o.text_column = "content";
    auto rs = read_records(p, o);
    ASSERT_EQ(rs.size(), 2u);
    EXPECT_EQ(rs[1].text, "two");
    EXPECT_EQ(rs[1].label.kind, Label::Kind::none);
}

TEST_F(ReadJsonl, QuestionAnsweringInHfDatasetsShape) {
    // "Zürich" has a 2-byte ü, so character and byte offsets differ after it.
    std::string p = write(
        "qa.jsonl",
        "{\"id\": \"q1\", \"title\": \"T\", \"context\": \"Z\\u00fcrich is in Switzerland.\", "
        "\"question\": \"Where?\", \"answers\": {\"text\": [\"Switzerland\"], \"answer_start\": [13]}}\n"
        "{\"id\": 7, \"context\": \"abc\", \"question\": \"none?\", "
        "\"answers\": {\"text\": [], \"answer_start\": []}}\n"
        "{\"id\": \"q3\", \"context\": \"abc\", \"question\": \"b?\", "
        "\"answers\": [{\"text\": \"b\", \"answer_start\": 1}]}\n");
    ReadOptions o;
    o.kind = RecordKind::qa;
    auto rs = read_records(p, o);
    ASSERT_EQ(rs.size(), 3u);
    EXPECT_EQ(rs[0].id, "q1");
    EXPECT_EQ(rs[0].title, "T");
    EXPECT_EQ(rs[0].question, "Where?");
    ASSERT_EQ(rs[0].answers.size(), 1u);
    EXPECT_EQ(rs[0].answers[0].answer_start, 13);
    EXPECT_EQ(rs[0].answers[0].answer_start_byte, 14);
    EXPECT_EQ(rs[0].context.substr(14, 11), "Switzerland");
    EXPECT_FALSE(rs[0].is_impossible);
    EXPECT_EQ(rs[1].id, "7");
    EXPECT_TRUE(rs[1].is_impossible);
    EXPECT_TRUE(rs[1].answers.empty());
    EXPECT_EQ(rs[2].answers[0].text, "b");

    std::string bad = write("qa_bad.jsonl",
                            "{\"context\": \"abc\", \"question\": \"q\", "
                            "\"answers\": {\"text\": [\"abc\"], \"answer_start\": [2]}}\n");
    expect_error([&] { read_records(bad, o); }, {bad + ":1:", "runs past the end of the context"});
}

TEST_F(ReadJsonl, QuestionsWithoutAnswersWhenAnswersAreNotRequired) {
    // Prediction inputs: no answers column, or one that is there anyway.
    std::string p = write("q.jsonl",
                          "{\"question\": \"Where?\", \"context\": \"In Paris.\"}\n"
                          "{\"id\": \"b\", \"question\": \"Who?\", \"context\": \"Ann.\", "
                          "\"answers\": {\"text\": [\"Ann\"], \"answer_start\": [0]}}\n");
    ReadOptions o;
    o.kind = RecordKind::qa;
    expect_error([&] { read_records(p, o); }, {p + ":1", "column 'answers' not found"});
    o.require_answers = false;
    auto rs = read_records(p, o);
    ASSERT_EQ(rs.size(), 2u);
    EXPECT_EQ(rs[0].question, "Where?");
    EXPECT_EQ(rs[0].context, "In Paris.");
    EXPECT_TRUE(rs[0].answers.empty());
    EXPECT_FALSE(rs[0].is_impossible);
    EXPECT_EQ(rs[1].id, "b");
    ASSERT_EQ(rs[1].answers.size(), 1u);
}

TEST_F(ReadJsonl, LinesLongerThanTheReadBlock) {
    // A 3 MiB line forces the buffer to grow; the lines around it survive.
    std::string big(3 << 20, 'x');
    std::string p = write("big.jsonl", "{\"text\": \"a\"}\n{\"text\": \"" + big +
                                           "\"}\n{\"text\": \"c\"}\n");
    auto rs = read_records(p, ReadOptions{});
    ASSERT_EQ(rs.size(), 3u);
    EXPECT_EQ(rs[1].text.size(), big.size());
    EXPECT_EQ(rs[2].text, "c");
    EXPECT_EQ(rs[2].line, 3);
}

TEST_F(ReadJsonl, ManyBlocksStreamInOrder) {
    // ~4 MB over many 1 MiB blocks: every line read once, in order.
    std::string text;
    const int n = 60000;
    for (int i = 0; i < n; ++i) text += "{\"text\": \"line number " + std::to_string(i) + "\"}\n";
    std::string p = write("many.jsonl", text);
    auto reader = open_records(p, ReadOptions{});
    Record r;
    int count = 0;
    while (reader->next(r)) {
        ASSERT_EQ(r.text, "line number " + std::to_string(count));
        ASSERT_EQ(r.line, count + 1);
        ++count;
    }
    EXPECT_EQ(count, n);
}

}  // namespace
}  // namespace loom
