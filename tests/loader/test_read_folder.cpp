// A folder of data files: sorted order, mixed formats, what is skipped or refused.
#include <gtest/gtest.h>

#include "data/record.h"
#include "loader_test_util.h"

namespace loom {
namespace {

using test::classification_options;
using test::expect_error;

class ReadFolder : public test::DataDir {};

TEST_F(ReadFolder, FilesInSortedOrderAcrossFormats) {
    write("train/part-2.jsonl", "{\"text\": \"c\", \"label\": 1}\n");
    write("train/part-1.csv", "text,label\na,0\nb,1\n");
    write("train/.hidden.jsonl", "not even json\n");
    auto reader = open_records(path("train"), classification_options());
    ASSERT_EQ(reader->files().size(), 2u);
    EXPECT_EQ(reader->files()[0], path("train/part-1.csv"));
    Record r;
    std::vector<std::string> texts, origins;
    while (reader->next(r)) {
        texts.push_back(r.text);
        origins.push_back(reader->origin(r));
    }
    EXPECT_EQ(texts, (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ(origins[1], path("train/part-1.csv") + ":3");
    EXPECT_EQ(origins[2], path("train/part-2.jsonl") + ":1");
    EXPECT_EQ(reader->report().records, 3);
}

TEST_F(ReadFolder, ErrorsNameTheFileInTheFolder) {
    write("d/a.jsonl", "{\"text\": \"a\", \"label\": 0}\n");
    write("d/b.jsonl", "{\"text\": \"b\", \"label\": 0}\n{broken\n");
    expect_error([&] { read_records(path("d"), classification_options()); },
                 {path("d/b.jsonl") + ":2:", "malformed JSON"});
}

TEST_F(ReadFolder, RefusedContents) {
    write("u/a.jsonl", "{\"text\": \"a\"}\n");
    write("u/notes.md", "# hi\n");
    expect_error([&] { read_records(path("u"), ReadOptions{}); },
                 {"'notes.md' has an unknown format", ".jsonl"});
    write("n/a.jsonl", "{\"text\": \"a\"}\n");
    write("n/sub/b.jsonl", "{\"text\": \"b\"}\n");
    expect_error([&] { read_records(path("n"), ReadOptions{}); }, {"nested folders"});
    std::filesystem::create_directories(dir_ / "empty");
    expect_error([&] { read_records(path("empty"), ReadOptions{}); }, {"has no data files"});
    write("e/a.jsonl", "");
    write("e/b.txt", "\n");
    expect_error([&] { read_records(path("e"), ReadOptions{}); },
                 {"empty dataset", "folder '" + path("e") + "' (2 files)"});
    expect_error([&] { read_records(path("nothing_here.jsonl"), ReadOptions{}); }, {"not found"});
    expect_error([&] { read_records(write("data.parquet", "PAR1"), ReadOptions{}); },
                 {"unknown format"});
}

}  // namespace
}  // namespace loom
