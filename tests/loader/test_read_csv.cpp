// CSV/TSV reader: RFC 4180 quoting, header columns, bad records.
#include <gtest/gtest.h>

#include "data/record.h"
#include "loader_test_util.h"

namespace loom {
namespace {

using test::classification_options;
using test::expect_error;

class ReadCsv : public test::DataDir {};

TEST_F(ReadCsv, Rfc4180Quoting) {
    std::string p = write("train.csv",
                          "id,text,label\r\n"
                          "1,plain text,0\r\n"
                          "2,\"with, comma\",1\r\n"
                          "3,\"she said \"\"hi\"\"\",1\r\n"
                          "4,\"two\r\nlines\",0\r\n"
                          "\r\n"
                          "5,,1\r\n"
                          "6,\"\",+2\n");
    auto rs = read_records(p, classification_options());
    ASSERT_EQ(rs.size(), 6u);
    EXPECT_EQ(rs[0].text, "plain text");
    EXPECT_EQ(rs[0].label.kind, Label::Kind::integer);
    EXPECT_EQ(rs[0].label.id, 0);
    EXPECT_EQ(rs[1].text, "with, comma");
    EXPECT_EQ(rs[2].text, "she said \"hi\"");
    EXPECT_EQ(rs[3].text, "two\nlines");  // CRLF inside quotes reads as "\n"
    EXPECT_EQ(rs[3].line, 5);             // where the record starts
    EXPECT_EQ(rs[4].text, "");
    EXPECT_EQ(rs[4].line, 8);  // the blank line 7 is skipped, lines still count
    EXPECT_EQ(rs[5].label.id, 2);
    EXPECT_EQ(rs[5].label.name, "2");
}

TEST_F(ReadCsv, TsvByExtensionWithLiteralQuotes) {
    // GLUE-style: a quote inside an unquoted field is just a character.
    std::string p = write("dev.tsv",
                          "sentence\tlabel\n"
                          "it 's a \"gem\" , really\tpositive\n"
                          "a, b, c\tnegative\n");
    ReadOptions o = classification_options();
    o.text_column = "sentence";
    auto rs = read_records(p, o);
    ASSERT_EQ(rs.size(), 2u);
    EXPECT_EQ(rs[0].text, "it 's a \"gem\" , really");
    EXPECT_EQ(rs[0].label.kind, Label::Kind::text);
    EXPECT_EQ(rs[0].label.name, "positive");
    EXPECT_EQ(rs[1].text, "a, b, c");  // commas are not delimiters in a .tsv
}

TEST_F(ReadCsv, TextPairColumnsAndTrailingEmptyField) {
    std::string p = write("pairs.csv", "q1,q2,label,note\nwhat,why,1,\n");
    ReadOptions o = classification_options();
    o.text_column = "q1";
    o.text_pair_column = "q2";
    auto rs = read_records(p, o);
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].text, "what");
    EXPECT_EQ(rs[0].text_pair, "why");
    EXPECT_TRUE(rs[0].has_pair);
}

TEST_F(ReadCsv, WrongFieldCountIsABadLine) {
    std::string p = write("bad.csv", "text,label\na,0\nb,1,extra\nc,1\n");
    expect_error([&] { read_records(p, classification_options()); },
                 {p + ":3:", "expected 2 fields as in the header, got 3", "skip_bad_lines"});
    ReadOptions o = classification_options();
    o.skip_bad_lines = true;
    ReadReport report;
    auto rs = read_records(p, o, &report);
    ASSERT_EQ(rs.size(), 2u);
    EXPECT_EQ(rs[1].text, "c");
    EXPECT_EQ(report.bad_lines, 1);
    ASSERT_EQ(report.bad_examples.size(), 1u);
    EXPECT_NE(report.bad_examples[0].find(p + ":3:"), std::string::npos);
}

TEST_F(ReadCsv, BrokenQuoting) {
    std::string p = write("q.csv", "text,label\n\"closed\"junk,0\nok,1\n");
    expect_error([&] { read_records(p, classification_options()); },
                 {p + ":2:", "after the closing quote"});
    std::string u = write("u.csv", "text,label\nok,1\n\"never closed,0\nmore,1\n");
    expect_error([&] { read_records(u, classification_options()); },
                 {u + ":3:", "unterminated quoted field"});
}

TEST_F(ReadCsv, MissingColumnListsTheHeader) {
    std::string p = write("cols.csv", "sentence,label\na,0\n");
    expect_error([&] { read_records(p, classification_options()); },
                 {p + ":1:", "column 'text' not found", "columns present: sentence, label"});
    ReadOptions o = classification_options();
    o.label_column = "stars";
    std::string q = write("cols2.csv", "text,label\na,0\n");
    expect_error([&] { read_records(q, o); },
                 {q + ":1:", "column 'stars' not found", "columns present: text, label"});
    expect_error([&] { read_records(write("dup.csv", "text,text\na,b\n"), ReadOptions{}); },
                 {"duplicate column 'text'"});
}

TEST_F(ReadCsv, LabelMapAndEmptyFiles) {
    ReadOptions o = classification_options();
    o.label_map = {{"0", "neg"}, {"1", "pos"}};
    auto rs = read_records(write("m.csv", "text,label\na,1\nb,0\n"), o);
    EXPECT_EQ(rs[0].label.name, "pos");
    EXPECT_EQ(rs[1].label.name, "neg");
    std::string p = write("m2.csv", "text,label\na,1\nb,2\n");
    expect_error([&] { read_records(p, o); },
                 {p + ":3:", "label '2' is not in label_map", "keys: 0, 1"});
    expect_error([&] { read_records(write("h.csv", "text,label\n"), o); }, {"empty dataset"});
    expect_error([&] { read_records(write("e.csv", ""), o); }, {"empty dataset"});
}

TEST_F(ReadCsv, QuestionAnsweringNeedsJson) {
    ReadOptions o;
    o.kind = RecordKind::qa;
    expect_error([&] { read_records(write("qa.csv", "question,context\na,b\n"), o); },
                 {"question-answering data must be JSONL or SQuAD JSON"});
    // Questions to answer carry no answers, so a CSV holds them.
    o.require_answers = false;
    auto rs =
        read_records(write("q.csv", "id,context,question\n7,\"In Paris, France.\",Where?\n"), o);
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].id, "7");
    EXPECT_EQ(rs[0].question, "Where?");
    EXPECT_EQ(rs[0].context, "In Paris, France.");
    EXPECT_TRUE(rs[0].answers.empty());
    expect_error([&] { read_records(write("nc.csv", "question\nWhere?\n"), o); },
                 {"nc.csv:1", "context"});
}

}  // namespace
}  // namespace loom
