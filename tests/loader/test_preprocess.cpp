// loom preprocess (data/preprocess.h), checked against the tokenizer itself:
//   - masked LM: every row is [CLS] chunk [SEP], rows stay inside documents,
//     and the chunks of a document put back together are its tokens;
//   - sentence order: [CLS] A [SEP] B [SEP] with the pair start on B, both
//     labels present, and A/B (swapped back for label 1) rebuild the chunk;
//   - causal LM: full rows that are the documents joined by <|endoftext|>;
//   - the output bytes do not depend on the thread count.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "config/job.h"
#include "data/preprocess.h"
#include "data/shard_dataset.h"
#include "loader_test_util.h"
#include "tokenizer/tokenizer.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;
namespace tk = loom::tokenizer;

std::string tok_path(const std::string& name) {
    return std::string(LOOM_TEST_DATA_DIR) + "/tokenizers/" + name + "/tokenizer.json";
}

class Preprocess : public DataDir {
  protected:
    // Documents of several sentences, some long enough for several chunks.
    std::vector<std::string> docs() const {
        std::vector<std::string> d;
        for (int i = 0; i < 6; ++i) {
            std::string s;
            for (int k = 0; k < 3 + 5 * i; ++k)
                s += fmt::format("Sentence {} of document {} talks about cats and dogs! ", k, i);
            d.push_back(s);
        }
        return d;
    }
    std::string corpus() {
        std::string jsonl;
        for (const auto& d : docs()) jsonl += nlohmann::json({{"text", d}}).dump() + "\n";
        return write("corpus.jsonl", jsonl);
    }
    PreprocessOptions options(const std::string& out, const std::string& tokenizer) {
        PreprocessOptions o;
        o.inputs = {corpus()};
        o.output = path(out);
        o.tokenizer_path = tok_path(tokenizer);
        o.max_seq_length = 24;
        return o;
    }
};

std::vector<uint32_t> row_ids(const ShardDataset& ds, int64_t i) {
    Feature f;
    const Feature& r = ds.row(i, f);
    return std::vector<uint32_t>(r.ids.begin(), r.ids.end());
}

TEST_F(Preprocess, MaskedLmRowsAreSpecialTokensAroundDocumentChunks) {
    const tk::Tokenizer tok = tk::Tokenizer::from_file(tok_path("bert-base-uncased"));
    const uint32_t cls = *tok.token_to_id("[CLS]"), sep = *tok.token_to_id("[SEP]");
    const PreprocessReport r = preprocess(options("mlm", "bert-base-uncased"));
    auto ds = ShardDataset::open(path("mlm"));
    EXPECT_EQ(r.documents, 6);
    EXPECT_EQ(ds->info().documents, 6);
    EXPECT_EQ(ds->size(), r.sequences);
    std::vector<uint32_t> joined;
    for (int64_t i = 0; i < ds->size(); ++i) {
        const auto ids = row_ids(*ds, i);
        ASSERT_LE(ids.size(), 24u);
        ASSERT_EQ(ids.front(), cls);
        ASSERT_EQ(ids.back(), sep);
        joined.insert(joined.end(), ids.begin() + 1, ids.end() - 1);
    }
    std::vector<uint32_t> want;
    for (const auto& d : docs()) {
        const auto e = tok.encode(d, false).ids;
        want.insert(want.end(), e.begin(), e.end());
    }
    EXPECT_EQ(joined, want);
    // Chunks never cross documents: a document of n tokens takes ceil(n / 22) rows.
    int64_t rows = 0;
    for (const auto& d : docs()) rows += (int64_t(tok.encode(d, false).ids.size()) + 21) / 22;
    EXPECT_EQ(ds->size(), rows);
}

TEST_F(Preprocess, SentenceOrderPairsRebuildTheChunks) {
    const tk::Tokenizer tok = tk::Tokenizer::from_file(tok_path("bert-base-uncased"));
    const uint32_t cls = *tok.token_to_id("[CLS]"), sep = *tok.token_to_id("[SEP]");
    PreprocessOptions o = options("sop", "bert-base-uncased");
    o.sentence_order = true;
    o.max_seq_length = 40;
    preprocess(o);
    auto ds = ShardDataset::open(path("sop"));
    EXPECT_TRUE(ds->info().sentence_order);
    int swapped = 0, in_order = 0;
    std::vector<uint32_t> joined;
    for (int64_t i = 0; i < ds->size(); ++i) {
        Feature f;
        const Feature& r = ds->row(i, f);
        const std::vector<uint32_t> ids(r.ids.begin(), r.ids.end());
        size_t pair = 0;
        while (pair < r.type_ids.size() && r.type_ids[pair] == 0) ++pair;
        ASSERT_GT(pair, 2u);
        ASSERT_LT(pair, ids.size() - 1);
        ASSERT_EQ(ids.front(), cls);
        ASSERT_EQ(ids[pair - 1], sep);
        ASSERT_EQ(ids.back(), sep);
        std::vector<uint32_t> a(ids.begin() + 1, ids.begin() + long(pair) - 1),
            b(ids.begin() + long(pair), ids.end() - 1);
        ASSERT_FALSE(a.empty());
        ASSERT_FALSE(b.empty());
        ASSERT_TRUE(r.label == 0 || r.label == 1);
        if (r.label == 1) {
            std::swap(a, b);
            ++swapped;
        } else {
            ++in_order;
        }
        joined.insert(joined.end(), a.begin(), a.end());
        joined.insert(joined.end(), b.begin(), b.end());
    }
    EXPECT_GT(swapped, 0);
    EXPECT_GT(in_order, 0);
    // [CLS] A [SEP] B [SEP] leaves 37 of 40 tokens per chunk; a one-token
    // tail cannot make two segments and is dropped.
    std::vector<uint32_t> want;
    for (const auto& d : docs()) {
        const auto e = tok.encode(d, false).ids;
        for (size_t at = 0; at < e.size(); at += 37) {
            const size_t n = std::min<size_t>(37, e.size() - at);
            if (n >= 2) want.insert(want.end(), e.begin() + long(at), e.begin() + long(at + n));
        }
    }
    EXPECT_EQ(joined, want);
}

TEST_F(Preprocess, CausalLmRowsAreTheDocumentsJoinedByEndOfText) {
    const tk::Tokenizer tok = tk::Tokenizer::from_file(tok_path("gpt2"));
    const uint32_t eos = *tok.token_to_id("<|endoftext|>");
    PreprocessOptions o = options("clm", "gpt2");
    o.task = Task::causal_lm;
    preprocess(o);
    auto ds = ShardDataset::open(path("clm"));
    std::vector<uint32_t> stream;
    for (const auto& d : docs()) {
        if (!stream.empty()) stream.push_back(eos);
        const auto e = tok.encode(d, false).ids;
        stream.insert(stream.end(), e.begin(), e.end());
    }
    ASSERT_EQ(ds->size(), int64_t(stream.size() / 24));
    for (int64_t i = 0; i < ds->size(); ++i) {
        const auto ids = row_ids(*ds, i);
        ASSERT_EQ(ids.size(), 24u);
        EXPECT_TRUE(std::equal(ids.begin(), ids.end(), stream.begin() + i * 24)) << "row " << i;
    }
    EXPECT_EQ(ds->info().documents, 6);
}

// One plain-text file is the same data through `loom preprocess` and
// `loom train`: one document (record) per line unless asked otherwise.
TEST_F(Preprocess, PlainTextIsOneDocumentPerLineAsInTraining) {
    const std::string text = write("lines.txt", "The first line.\nThe second line.\nA third.\n");
    PreprocessOptions o = options("lines", "bert-base-uncased");
    o.inputs = {text};
    const PreprocessReport r = preprocess(o);
    EXPECT_EQ(r.documents, 3);
    EXPECT_EQ(r.text_files, 1);
    // The training route: a job's data section with sample_by unset.
    EXPECT_EQ(DataArgs{}.sample_by, PreprocessOptions{}.sample_by);
    ReadOptions ro;
    ro.sample_by = DataArgs{}.sample_by;
    ReadReport report;
    EXPECT_EQ(read_records(text, ro, &report).size(), 3u);
    EXPECT_EQ(report.text_files, 1);
    // Paragraphs on request, in both.
    PreprocessOptions para = options("para", "bert-base-uncased");
    para.inputs = {text};
    para.sample_by = SampleBy::paragraph;
    EXPECT_EQ(preprocess(para).documents, 1);
    ro.sample_by = SampleBy::paragraph;
    EXPECT_EQ(read_records(text, ro).size(), 1u);
    // JSONL input is not plain text.
    EXPECT_EQ(preprocess(options("jsonl", "bert-base-uncased")).text_files, 0);
}

TEST_F(Preprocess, OutputDoesNotDependOnThreads) {
    std::vector<std::string> bytes;
    for (int threads : {1, 2}) {
        const std::string name = fmt::format("t{}", threads);
        PreprocessOptions o = options(name, "unigram-albert-style");
        o.sentence_order = true;
        o.threads = threads;
        o.batch_documents = 4;
        preprocess(o);
        std::ifstream in(path(name) + "/shard-00000.bin", std::ios::binary);
        bytes.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    ASSERT_FALSE(bytes[0].empty());
    EXPECT_EQ(bytes[0], bytes[1]);
    // And a second run into an existing shard folder is refused.
    expect_error([&] { preprocess(options("t1", "unigram-albert-style")); }, {"t1", "index.json"});
}

}  // namespace
}  // namespace loom::test
