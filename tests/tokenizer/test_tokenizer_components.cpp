// Pipeline pieces the fixtures do not exercise: batch encoding on many
// threads, BatchLongest padding, BPE options (continuing_subword_prefix,
// end_of_word_suffix, byte_fallback, legacy "a b" merges) and their decoders.
// Expected values follow HF tokenizers' documented behaviour for these options.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace loom::tokenizer {
namespace {

const std::string k_data = LOOM_TEST_DATA_DIR "/tokenizers/";

TEST(TokenizerBatch, MatchesSequentialEncodingOnManyThreads) {
    const Tokenizer tok = Tokenizer::from_file(k_data + "bert-base-uncased/tokenizer.json");
    std::vector<std::string> texts;
    for (int i = 0; i < 300; ++i)
        texts.push_back("Sentence number " + std::to_string(i) + " has " + std::string(i % 17, 'x') + " in it.");
    const std::vector<Encoding> batch = tok.encode_batch(texts, true, 4);
    ASSERT_EQ(batch.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
        const Encoding one = tok.encode(texts[i], true);
        EXPECT_EQ(batch[i].ids, one.ids) << i;
        EXPECT_EQ(batch[i].offsets, one.offsets) << i;
    }
}

TEST(TokenizerBatch, BatchLongestPadsToTheLongestAndMultiple) {
    Tokenizer tok = Tokenizer::from_file(k_data + "gpt2/tokenizer.json");
    PaddingParams p;
    p.batch_longest = true;
    p.pad_to_multiple_of = 4;
    p.pad_id = 50256;
    p.pad_token = "<|endoftext|>";
    p.direction = PaddingDirection::Left;
    tok.set_padding(p);
    const std::vector<Encoding> b = tok.encode_batch(std::vector<std::string>{"a", "one two three four five"}, true, 2);
    ASSERT_EQ(b[1].size(), 8u);  // 5 tokens, rounded up to a multiple of 4
    ASSERT_EQ(b[0].size(), 8u);
    EXPECT_EQ(b[0].ids.front(), 50256u);
    EXPECT_EQ(b[0].attention_mask, (std::vector<uint32_t>{0, 0, 0, 0, 0, 0, 0, 1}));
    EXPECT_EQ(b[0].sequence_ids().back(), 0);
}

std::string bpe_tokenizer(const std::string& model_fields, const std::string& vocab, const std::string& merges,
                          const std::string& decoder) {
    return R"({"pre_tokenizer": {"type": "WhitespaceSplit"}, "decoder": )" + decoder +
           R"(, "model": {"type": "BPE", )" + model_fields + R"("vocab": )" + vocab + R"(, "merges": )" + merges + "}}";
}

TEST(TokenizerBpe, EndOfWordSuffixAndDecoder) {
    const Tokenizer tok = Tokenizer::from_json(bpe_tokenizer(
        R"("end_of_word_suffix": "</w>", "unk_token": "<unk>", )",
        R"({"<unk>": 0, "l": 1, "o": 2, "w</w>": 3, "lo": 4, "low</w>": 5, "e": 6, "r</w>": 7, "w": 8})",
        R"(["l o", "lo w</w>"])", R"({"type": "BPEDecoder", "suffix": "</w>"})"));
    const Encoding e = tok.encode("low lower", false);
    // The suffix only applies to a word's last char: "lower" keeps a bare "w".
    EXPECT_EQ(e.tokens, (std::vector<std::string>{"low</w>", "lo", "w", "e", "r</w>"}));
    EXPECT_EQ(tok.decode(e.ids, false), "low lower");
}

TEST(TokenizerBpe, ContinuingSubwordPrefixMergesStripThePrefix) {
    const Tokenizer tok = Tokenizer::from_json(bpe_tokenizer(
        R"("continuing_subword_prefix": "##", )", R"({"a": 0, "##b": 1, "##c": 2, "ab": 3, "##bc": 4, "abc": 5})",
        R"([["##b", "##c"], ["a", "##bc"]])", R"({"type": "WordPiece", "prefix": "##", "cleanup": false})"));
    const Encoding e = tok.encode("abc ab", false);
    EXPECT_EQ(e.tokens, (std::vector<std::string>{"abc", "a", "##b"}));
    EXPECT_EQ(tok.decode(e.ids, false), "abc ab");
}

TEST(TokenizerBpe, ByteFallbackAndFusedUnknown) {
    const Tokenizer tok = Tokenizer::from_json(bpe_tokenizer(
        R"("byte_fallback": true, "unk_token": "<unk>", "fuse_unk": true, )",
        R"({"<unk>": 0, "a": 1, "<0xC3>": 2, "<0xA9>": 3})", "[]",
        R"({"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]})"));
    const Encoding e = tok.encode("a\xC3\xA9zz", false);
    // é has byte tokens; z has none and becomes one fused <unk>.
    EXPECT_EQ(e.tokens, (std::vector<std::string>{"a", "<0xC3>", "<0xA9>", "<unk>"}));
    // Byte tokens of one char both map back to the whole char.
    EXPECT_EQ(e.offsets_utf8[1], (Offsets{1, 3}));
    EXPECT_EQ(e.offsets_utf8[2], (Offsets{1, 3}));
    EXPECT_EQ(e.offsets_utf8[3], (Offsets{3, 5}));
    EXPECT_EQ(tok.decode(e.ids, false), "a\xC3\xA9<unk>");
}

}  // namespace
}  // namespace loom::tokenizer
