// Plain-text reader: by line, paragraph and document.
#include <gtest/gtest.h>

#include "data/record.h"
#include "loader_test_util.h"

namespace loom {
namespace {

using test::expect_error;

class ReadText : public test::DataDir {};

const char* k_text =
    "First line.\n"
    "Second line of the first paragraph.\r\n"
    "\n"
    "   \n"
    "A second paragraph.\n"
    "\n";

TEST_F(ReadText, ByLineSkipsBlankLines) {
    auto rs = read_records(write("a.txt", k_text), ReadOptions{});
    ASSERT_EQ(rs.size(), 3u);
    EXPECT_EQ(rs[0].text, "First line.");
    EXPECT_EQ(rs[1].text, "Second line of the first paragraph.");  // \r dropped
    EXPECT_EQ(rs[2].text, "A second paragraph.");
    EXPECT_EQ(rs[2].line, 5);
}

TEST_F(ReadText, ByParagraph) {
    ReadOptions o;
    o.sample_by = SampleBy::paragraph;
    auto rs = read_records(write("a.txt", k_text), o);
    ASSERT_EQ(rs.size(), 2u);
    EXPECT_EQ(rs[0].text, "First line.\nSecond line of the first paragraph.");
    EXPECT_EQ(rs[0].line, 1);
    EXPECT_EQ(rs[1].text, "A second paragraph.");
    EXPECT_EQ(rs[1].line, 5);
}

TEST_F(ReadText, ByDocument) {
    ReadOptions o;
    o.sample_by = SampleBy::document;
    auto rs = read_records(write("a.txt", k_text), o);
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].text,
              "First line.\nSecond line of the first paragraph.\n\n   \nA second paragraph.\n");
}

TEST_F(ReadText, NoLabelsAndEmptyFiles) {
    ReadOptions cls;
    cls.kind = RecordKind::classification;
    expect_error([&] { read_records(write("a.txt", k_text), cls); },
                 {"plain-text files hold no labels"});
    std::string p = write("blank.txt", "\n \n\t\n");
    expect_error([&] { read_records(p, ReadOptions{}); },
                 {"empty dataset", p, "blank lines are not records"});
    ReadOptions doc;
    doc.sample_by = SampleBy::document;
    expect_error([&] { read_records(p, doc); }, {"empty dataset"});
}

}  // namespace
}  // namespace loom
