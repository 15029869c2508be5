// Token shards (data/shard_*.h) and compressed inputs (data/input_stream.h):
//   - writer -> dataset round trip: ids, lengths, segment pairs and
//     sentence-order labels, document offsets, several shards, uint16 and
//     uint32 ids by vocabulary size;
//   - a truncated shard, a damaged header and an id outside the vocabulary
//     are errors naming the shard file and the byte offset;
//   - the Loader gives the same batches over shards as over the same rows
//     in memory, for every dp rank;
//   - .gz and .zst JSONL/text read the records of the plain file; a damaged
//     compressed file is an error naming it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "data/loader.h"
#include "data/shard_dataset.h"
#include "data/shard_writer.h"
#include "loader_test_util.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;

class Shards : public DataDir {};

struct Seq {
    std::vector<uint32_t> ids;
    uint32_t pair = 0;
    uint8_t sop = 0;
};

std::vector<Seq> make_sequences(int n, uint32_t vocab, uint32_t seed, bool pairs) {
    std::mt19937 g(seed);
    std::vector<Seq> out;
    for (int i = 0; i < n; ++i) {
        Seq s;
        const int len = 2 + int(g() % 30);
        for (int t = 0; t < len; ++t) s.ids.push_back(uint32_t(g() % vocab));
        if (pairs) {
            s.pair = 1 + uint32_t(g() % uint32_t(len - 1));
            s.sop = uint8_t(g() % 2);
        }
        out.push_back(s);
    }
    return out;
}

nlohmann::json write_folder(const std::string& dir, const std::vector<Seq>& seqs, int64_t vocab,
                            bool pairs, uint64_t shard_bytes) {
    ShardWriterOptions o;
    o.vocab_size = vocab;
    o.max_seq_length = 32;
    o.sentence_order = pairs;
    o.tokenizer_hash = "0123456789abcdef";
    o.shard_bytes = shard_bytes;
    ShardWriter w(dir, o);
    uint64_t tokens = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
        if (i % 3 == 0) w.add_document_start(tokens);  // a document every 3 sequences
        w.add_sequence(seqs[i].ids, seqs[i].pair, seqs[i].sop);
        tokens += seqs[i].ids.size();
    }
    return w.finish();
}

TEST_F(Shards, RoundTripAcrossShardsAndIdWidths) {
    for (int64_t vocab : {int64_t(30522), int64_t(70000)}) {
        for (bool pairs : {false, true}) {
            SCOPED_TRACE(fmt::format("vocab {} pairs {}", vocab, pairs));
            const std::string dir = path(fmt::format("s{}_{}", vocab, int(pairs)));
            const auto seqs = make_sequences(200, uint32_t(vocab), uint32_t(vocab + pairs), pairs);
            const nlohmann::json index = write_folder(dir, seqs, vocab, pairs, 1024);
            EXPECT_TRUE(is_shard_folder(dir));
            auto ds = ShardDataset::open(dir);
            EXPECT_EQ(ds->info().id_bytes, vocab <= 65536 ? 2 : 4);
            EXPECT_GT(ds->info().shard_files.size(), 3u) << "1 KiB shards should split 200 rows";
            ASSERT_EQ(ds->size(), 200);
            EXPECT_EQ(ds->info().tokenizer_hash, "0123456789abcdef");
            int64_t total = 0;
            Feature scratch;
            for (int64_t i = 0; i < ds->size(); ++i) {
                const Seq& s = seqs[size_t(i)];
                ASSERT_EQ(ds->length(i), int64_t(s.ids.size()));
                const Feature& f = ds->row(i, scratch);
                ASSERT_EQ(f.ids.size(), s.ids.size());
                for (size_t t = 0; t < s.ids.size(); ++t) {
                    ASSERT_EQ(uint32_t(f.ids[t]), s.ids[t]) << "row " << i;
                    ASSERT_EQ(f.type_ids[t], pairs && t >= s.pair ? 1 : 0) << "row " << i;
                }
                EXPECT_EQ(f.label, pairs ? int64_t(s.sop) : -100) << "row " << i;
                total += ds->length(i);
            }
            EXPECT_EQ(ds->total_tokens(), total);
            EXPECT_EQ(ds->info().documents, 67);  // sequences 0, 3, ..., 198
            // Document starts, shard by shard, in global token offsets.
            std::vector<uint64_t> want, got;
            uint64_t tok = 0;
            for (size_t i = 0; i < seqs.size(); ++i) {
                if (i % 3 == 0) want.push_back(tok);
                tok += seqs[i].ids.size();
            }
            for (size_t k = 0; k < ds->info().shard_files.size(); ++k) {
                uint64_t shard_first = 0;
                for (int64_t i = 0; i < ds->first_sequence(k); ++i)
                    shard_first += seqs[size_t(i)].ids.size();
                for (uint64_t off : ds->document_offsets(k)) got.push_back(shard_first + off);
            }
            EXPECT_EQ(got, want);
        }
    }
}

std::string first_shard(const std::string& dir) {
    return (fs::path(dir) / "shard-00000.bin").string();
}

TEST_F(Shards, TruncatedDamagedAndOutOfVocabularyShardsAreErrorsWithOffsets) {
    const auto seqs = make_sequences(50, 1000, 7, false);
    const std::string dir = path("good");
    write_folder(dir, seqs, 1000, false, 1 << 20);
    const std::string shard = first_shard(dir);
    const auto size = fs::file_size(shard);

    fs::copy(dir, path("cut"), fs::copy_options::recursive);
    fs::resize_file(first_shard(path("cut")), size - 13);
    std::string msg = expect_error([&] { ShardDataset::open(path("cut")); }, {"shard-00000.bin"});
    EXPECT_NE(msg.find(std::to_string(size - 13)), std::string::npos) << msg;

    fs::copy(dir, path("magic"), fs::copy_options::recursive);
    {
        std::fstream f(first_shard(path("magic")), std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(0);
        f.write("NOTSHARD", 8);
    }
    expect_error([&] { ShardDataset::open(path("magic")); }, {"shard-00000.bin", "offset 0"});

    // An id past the vocabulary in row 0's first token (ids start at 64 + the JSON header).
    fs::copy(dir, path("ids"), fs::copy_options::recursive);
    auto ds_ok = ShardDataset::open(dir);
    const std::string bad = first_shard(path("ids"));
    std::ifstream in(bad, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    in.close();
    uint64_t json_bytes = 0;
    std::memcpy(&json_bytes, bytes.data() + 40, 8);
    const size_t ids_at = size_t(64 + ((json_bytes + 7) & ~uint64_t(7)));
    bytes[ids_at] = char(0xff);
    bytes[ids_at + 1] = char(0xff);
    std::ofstream(bad, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    auto ds = ShardDataset::open(path("ids"));
    Feature scratch;
    msg = expect_error([&] { ds->row(0, scratch); },
                       {"shard-00000.bin", "offset " + std::to_string(ids_at), "65535"});
}

TEST_F(Shards, LoaderBatchesEqualThoseOfTheSameRowsInMemory) {
    const auto seqs = make_sequences(90, 500, 3, false);
    write_folder(path("lm"), seqs, 500, false, 512);
    auto mem = std::make_shared<FeatureSet>();
    mem->task = Task::masked_lm;
    for (const Seq& s : seqs) {
        Feature f;
        f.ids.assign(s.ids.begin(), s.ids.end());
        f.type_ids.assign(s.ids.size(), 0);
        mem->features.push_back(f);
    }
    for (int64_t dp : {1, 2, 3}) {
        for (int64_t r = 0; r < dp; ++r) {
            LoaderOptions o;
            o.batch_size = 4;
            o.dp_rank = r;
            o.dp_size = dp;
            o.seed = 9;
            o.mask_id = 4;
            o.vocab_size = 500;
            o.special_ids = {0, 1, 2, 3, 4};
            Loader a(mem, o);
            Loader b(std::shared_ptr<const RowSource>(ShardDataset::open(path("lm"))), o);
            ASSERT_EQ(a.batches_per_epoch(), b.batches_per_epoch());
            TokenBatch x, y;
            int n = 0;
            while (a.next(x)) {
                ASSERT_TRUE(b.next(y));
                ASSERT_EQ(x.input_ids, y.input_ids)
                    << "dp " << dp << " rank " << r << " batch " << n;
                ASSERT_EQ(x.labels, y.labels);
                ASSERT_EQ(x.attention_mask, y.attention_mask);
                ++n;
            }
            EXPECT_FALSE(b.next(y));
            EXPECT_GT(n, 0);
        }
    }
}

TEST_F(Shards, CompressedFilesReadLikePlainOnes) {
    if (std::system("command -v gzip >/dev/null && command -v zstd >/dev/null") != 0)
        GTEST_SKIP() << "gzip or zstd is not installed (Debian: gzip, zstd)";
    std::string jsonl, text;
    for (int i = 0; i < 3000; ++i) {
        jsonl += fmt::format(
            "{{\"text\": \"line {} of the corpus, with some words\", \"label\": \"{}\"}}\n", i,
            i % 3);
        text += fmt::format("plain line {} with ünïcode\n", i);
    }
    write("a.jsonl", jsonl);
    write("b.txt", text);
    ASSERT_EQ(std::system(
                  ("cd " + dir_.string() +
                   " && gzip -k a.jsonl && zstd -q -k a.jsonl && gzip -k b.txt && zstd -q -k b.txt")
                      .c_str()),
              0);
    const ReadOptions cls = classification_options();
    ReadOptions lm;
    lm.kind = RecordKind::text;
    const auto plain_j = read_records(path("a.jsonl"), cls);
    const auto plain_t = read_records(path("b.txt"), lm);
    ASSERT_EQ(plain_j.size(), 3000u);
    for (const char* ext : {".gz", ".zst"}) {
        SCOPED_TRACE(ext);
        const auto j = read_records(path(std::string("a.jsonl") + ext), cls);
        const auto t = read_records(path(std::string("b.txt") + ext), lm);
        ASSERT_EQ(j.size(), plain_j.size());
        ASSERT_EQ(t.size(), plain_t.size());
        for (size_t i = 0; i < j.size(); ++i) ASSERT_EQ(j[i].text, plain_j[i].text);
        for (size_t i = 0; i < t.size(); ++i) ASSERT_EQ(t[i].text, plain_t[i].text);
    }
    // Truncated compressed data is an error naming the file, not a short read.
    for (const char* ext : {".gz", ".zst"}) {
        const std::string p = path(std::string("a.jsonl") + ext);
        fs::resize_file(p, fs::file_size(p) / 2);
        expect_error([&] { read_records(p, cls); }, {std::string("a.jsonl") + ext});
    }
}

}  // namespace
}  // namespace loom::test
