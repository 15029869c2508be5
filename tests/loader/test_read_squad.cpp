// JSON documents: SQuAD v1.1 / v2.0 and lists of records.
#include <gtest/gtest.h>

#include "data/record.h"
#include "loader_test_util.h"

namespace loom {
namespace {

using test::expect_error;

class ReadSquad : public test::DataDir {
protected:
    ReadOptions qa() {
        ReadOptions o;
        o.kind = RecordKind::qa;
        return o;
    }
};

// Shaped like the official files (pretty-printed, as SQuAD dev files are not).
const char* k_squad_v11 = R"({"version": "1.1", "data": [
 {"title": "Normans", "paragraphs": [
   {"context": "The Normans were in Normandy, a region in France.",
    "qas": [
      {"id": "a1", "question": "Where were the Normans?",
       "answers": [{"text": "Normandy", "answer_start": 20},
                   {"text": "in Normandy", "answer_start": 17}]},
      {"id": "a2", "question": "Which country?",
       "answers": [{"text": "France", "answer_start": 42}]}]}]},
 {"title": "Caf\u00e9", "paragraphs": [
   {"context": "Caf\u00e9 culture is old.",
    "qas": [{"id": "b1", "question": "What is old?",
             "answers": [{"text": "culture", "answer_start": 5}]}]}]}]})";

TEST_F(ReadSquad, Version11OneRecordPerQuestion) {
    auto rs = read_records(write("dev-v1.1.json", k_squad_v11), qa());
    ASSERT_EQ(rs.size(), 3u);
    EXPECT_EQ(rs[0].id, "a1");
    EXPECT_EQ(rs[0].title, "Normans");
    EXPECT_EQ(rs[0].question, "Where were the Normans?");
    EXPECT_EQ(rs[0].context, "The Normans were in Normandy, a region in France.");
    ASSERT_EQ(rs[0].answers.size(), 2u);
    EXPECT_EQ(rs[0].answers[0].text, "Normandy");
    EXPECT_EQ(rs[0].answers[0].answer_start, 20);
    EXPECT_EQ(rs[0].answers[1].answer_start, 17);
    EXPECT_FALSE(rs[0].is_impossible);
    EXPECT_EQ(rs[1].context.substr(rs[1].answers[0].answer_start_byte, 6), "France");
    // "Café": é is two bytes, so "culture" starts at character 5 but byte 6.
    EXPECT_EQ(rs[2].answers[0].answer_start, 5);
    EXPECT_EQ(rs[2].answers[0].answer_start_byte, 6);
    EXPECT_EQ(rs[2].context.substr(6, 7), "culture");
    EXPECT_EQ(rs[2].title, "Caf\xc3\xa9");
    EXPECT_EQ(rs[2].line, 0);
    EXPECT_EQ(rs[2].index, 2);
}

TEST_F(ReadSquad, Version20Unanswerable) {
    const char* v2 = R"({"version": "v2.0", "data": [{"title": "T", "paragraphs": [
      {"context": "Alpha beta.", "qas": [
        {"id": "x", "question": "First?", "answers": [{"text": "Alpha", "answer_start": 0}],
         "is_impossible": false},
        {"id": "y", "question": "Gamma?", "answers": [],
         "plausible_answers": [{"text": "beta", "answer_start": 6}], "is_impossible": true}]}]}]})";
    auto rs = read_records(write("train-v2.0.json", v2), qa());
    ASSERT_EQ(rs.size(), 2u);
    EXPECT_FALSE(rs[0].is_impossible);
    EXPECT_EQ(rs[0].answers.size(), 1u);
    EXPECT_TRUE(rs[1].is_impossible);
    EXPECT_TRUE(rs[1].answers.empty());  // plausible answers are not gold
}

TEST_F(ReadSquad, QuestionsWithoutAnswersWhenAnswersAreNotRequired) {
    const char* doc = R"({"data": [{"title": "T", "paragraphs": [{"context": "Alpha beta.",
        "qas": [{"id": "x", "question": "First?"}]}]}]})";
    const std::string p = write("q.json", doc);
    expect_error([&] { read_records(p, qa()); }, {"qas[0]: missing 'answers'"});
    ReadOptions o = qa();
    o.require_answers = false;
    auto rs = read_records(p, o);
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].id, "x");
    EXPECT_TRUE(rs[0].answers.empty());
    EXPECT_FALSE(rs[0].is_impossible);
}

TEST_F(ReadSquad, BadEntriesNameTheirPath) {
    const char* bad = R"({"data": [{"title": "T", "paragraphs": [{"context": "short", "qas": [
        {"id": "ok", "question": "q", "answers": [{"text": "short", "answer_start": 0}]},
        {"id": "past", "question": "q", "answers": [{"text": "shorter", "answer_start": 2}]},
        {"id": "noq", "answers": []}]}]}]})";
    std::string p = write("bad.json", bad);
    expect_error([&] { read_records(p, qa()); },
                 {p, "data[0].paragraphs[0].qas[1]", "runs past the end of the context"});
    ReadOptions o = qa();
    o.skip_bad_lines = true;
    ReadReport report;
    auto rs = read_records(p, o, &report);
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].id, "ok");
    EXPECT_EQ(report.bad_lines, 2);
    EXPECT_NE(report.bad_examples[1].find("data[0].paragraphs[0].qas[2]: missing 'question'"),
              std::string::npos)
        << report.bad_examples[1];
    expect_error([&] { read_records(write("broken.json", "{\"data\": [}"), qa()); },
                 {"broken.json", "malformed JSON document"});
}

TEST_F(ReadSquad, SquadOnlyFitsQuestionAnswering) {
    ReadOptions cls;
    cls.kind = RecordKind::classification;
    expect_error([&] { read_records(write("s.json", k_squad_v11), cls); },
                 {"is a SQuAD file", "question-answering"});
}

TEST_F(ReadSquad, JsonListsAndJsonLinesInDotJson) {
    ReadOptions cls;
    cls.kind = RecordKind::classification;
    auto list = read_records(
        write("list.json", "[\n {\"text\": \"a\", \"label\": 0},\n {\"text\": \"b\", \"label\": 1}\n]\n"),
        cls);
    ASSERT_EQ(list.size(), 2u);
    EXPECT_EQ(list[1].text, "b");
    auto wrapped = read_records(write("wrapped.json", "{\"data\": [{\"text\": \"c\", \"label\": 2}]}"),
                                cls);
    ASSERT_EQ(wrapped.size(), 1u);
    EXPECT_EQ(wrapped[0].label.id, 2);
    std::string lines = write("lines.json", "{\"text\": \"d\", \"label\": 0}\n{\"text\": \"e\", \"label\": 1}\n");
    auto rs = read_records(lines, cls);
    ASSERT_EQ(rs.size(), 2u);
    EXPECT_EQ(rs[1].line, 2);  // read as JSON lines, so lines are known
    std::string p = write("missing.json", "[{\"text\": \"a\"}]");
    expect_error([&] { read_records(p, cls); }, {p, "[0]", "column 'label' not found"});
    expect_error([&] { read_records(write("num.json", "42"), cls); },
                 {"must be SQuAD", "a list of records"});
}

}  // namespace
}  // namespace loom
