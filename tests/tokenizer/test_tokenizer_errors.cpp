// Malformed tokenizer.json files fail with a message naming the file and the
// JSON path; invalid UTF-8 input is repaired (U+FFFD), never a crash.
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {
namespace {

// A small valid BPE tokenizer; tests break one part of it.
std::string bpe_json(const std::string& model_extra, const std::string& merges,
                     const std::string& rest = R"("pre_tokenizer": {"type": "Whitespace"})") {
    return R"({"version": "1.0", "added_tokens": [], )" + rest + R"(, "model": {"type": "BPE", )" +
           model_extra + R"("vocab": {"a": 0, "b": 1, "ab": 2, "c": 3}, "merges": )" + merges +
           "}}";
}

std::string load_error(const std::string& json) {
    try {
        Tokenizer::from_json(json, "tokenizer.json");
    } catch (const TokenizerError& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(TokenizerErrors, ValidFileLoadsAndEncodes) {
    const Tokenizer tok = Tokenizer::from_json(bpe_json("", R"([["a", "b"]])"));
    const Encoding e = tok.encode("ab c", false);
    EXPECT_EQ(e.ids, (std::vector<uint32_t>{2, 3}));
    EXPECT_EQ(e.tokens, (std::vector<std::string>{"ab", "c"}));
}

TEST(TokenizerErrors, MissingModel) {
    const std::string msg = load_error(R"({"version": "1.0", "normalizer": null})");
    EXPECT_EQ(msg, "tokenizer.json: /: missing required field 'model'");
}

TEST(TokenizerErrors, NotJson) {
    EXPECT_NE(load_error("{\"model\": ").find("tokenizer.json: invalid JSON"), std::string::npos);
}

TEST(TokenizerErrors, UnknownModelType) {
    const std::string msg = load_error(R"({"model": {"type": "Magic", "vocab": {}}})");
    EXPECT_EQ(msg,
              "tokenizer.json: /model/type: unknown model type 'Magic' (expected BPE, WordPiece, "
              "Unigram or WordLevel)");
}

TEST(TokenizerErrors, UnknownNormalizerType) {
    const std::string msg = load_error(bpe_json(
        "", "[]",
        R"("normalizer": {"type": "Sequence", "normalizers": [{"type": "Lowercase"}, {"type": "Shout"}]})"));
    EXPECT_EQ(msg,
              "tokenizer.json: /normalizer/normalizers/1/type: unknown normalizer type 'Shout'");
}

TEST(TokenizerErrors, MergeWithUnknownToken) {
    const std::string msg = load_error(bpe_json("", R"([["a", "b"], ["ab", "zz"]])"));
    EXPECT_EQ(msg, "tokenizer.json: /model/merges/1: token 'zz' is not in the vocabulary");
}

TEST(TokenizerErrors, MalformedMergeString) {
    const std::string msg = load_error(bpe_json("", R"(["a b", "a b c"])"));
    EXPECT_EQ(msg,
              "tokenizer.json: /model/merges/1: a merge string must be two tokens separated by one "
              "space, found 'a b c'");
}

TEST(TokenizerErrors, MergeResultNotInVocabulary) {
    const std::string msg = load_error(bpe_json("", R"(["a b", "b c"])"));
    EXPECT_EQ(msg, "tokenizer.json: /model/merges/1: merged token 'bc' is not in the vocabulary");
}

TEST(TokenizerErrors, VocabularyIdOutOfRange) {
    const std::string msg = load_error(
        R"({"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "a": 7}}})");
    EXPECT_EQ(msg,
              "tokenizer.json: /model/vocab/a: id 7 is out of range for a vocabulary of 2 tokens");
}

TEST(TokenizerErrors, NegativeId) {
    const std::string msg =
        load_error(R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": -1}}})");
    EXPECT_EQ(msg, "tokenizer.json: /model/vocab/[UNK]: expected a non-negative integer, found -1");
}

TEST(TokenizerErrors, DuplicateId) {
    const std::string msg =
        load_error(R"({"model": {"type": "WordPiece", "vocab": {"a": 0, "b": 0}}})");
    EXPECT_EQ(msg, "tokenizer.json: /model/vocab/b: id 0 is used by more than one token");
}

TEST(TokenizerErrors, UnigramUnkIdOutOfRange) {
    const std::string msg = load_error(
        R"({"model": {"type": "Unigram", "unk_id": 5, "vocab": [["<unk>", 0.0], ["a", -1.0]]}})");
    EXPECT_EQ(
        msg,
        "tokenizer.json: /model/unk_id: unk_id 5 is out of range for a vocabulary of 2 pieces");
}

TEST(TokenizerErrors, TemplateIdOutOfRange) {
    const std::string rest =
        R"("post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}], "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [99], "tokens": ["[CLS]"]}}})";
    const std::string msg = load_error(bpe_json("", "[]", rest));
    EXPECT_EQ(msg,
              "tokenizer.json: /post_processor/special_tokens/[CLS]/ids/0: id 99 is out of range "
              "for a vocabulary of 4 tokens");
}

TEST(TokenizerErrors, InvalidRegex) {
    const std::string rest =
        R"("pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a|b"}, "behavior": "Isolated", "invert": false})";
    const std::string msg = load_error(bpe_json("", "[]", rest));
    EXPECT_EQ(
        msg.rfind(
            "tokenizer.json: /pre_tokenizer/pattern/Regex: invalid regex '(a|b' at offset 4: ", 0),
        0u)
        << msg;
}

TEST(TokenizerErrors, WrongFieldType) {
    const std::string rest = R"("pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": "yes"})";
    EXPECT_EQ(
        load_error(bpe_json("", "[]", rest)),
        "tokenizer.json: /pre_tokenizer/add_prefix_space: expected true or false, found string");
}

TEST(TokenizerErrors, MissingFile) {
    EXPECT_THROW(Tokenizer::from_file("/nonexistent/tokenizer.json"), TokenizerError);
}

TEST(TokenizerInput, InvalidUtf8IsReplacedLikeFromUtf8Lossy) {
    // Rust's from_utf8_lossy: one U+FFFD per maximal invalid subsequence.
    EXPECT_EQ(utf8_lossy("a\xFF"
                         "b"),
              "a\xEF\xBF\xBD"
              "b");
    EXPECT_EQ(utf8_lossy("\xE2\x82"), "\xEF\xBF\xBD");  // truncated 3-byte sequence: one
    EXPECT_EQ(utf8_lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong: two
    EXPECT_EQ(utf8_lossy("\xED\xA0\x80"),
              "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: three
    EXPECT_TRUE(utf8_is_valid("h\xC3\xA9llo"));
    EXPECT_FALSE(utf8_is_valid("h\xC3llo"));

    const Tokenizer tok = Tokenizer::from_json(
        bpe_json("", R"([["a", "b"]])", R"("pre_tokenizer": {"type": "Whitespace"})"));
    // Not in the vocabulary and no unk token: the BPE drops the U+FFFD, but
    // offsets refer to the repaired text ("ab" + U+FFFD + " c").
    const Encoding e = tok.encode("ab\xFF c", false);
    EXPECT_EQ(e.tokens, (std::vector<std::string>{"ab", "c"}));
    EXPECT_EQ(e.offsets_utf8.back(), (Offsets{6, 7}));
    EXPECT_EQ(e.offsets.back(), (Offsets{4, 5}));
}

}  // namespace
}  // namespace loom::tokenizer

namespace loom::tokenizer {
namespace {

// Found by fuzz_tokenizer_load: a number past double's range is a JSON error
// naming the file, not an escaping exception.
TEST(TokenizerErrors, NumberOutOfRangeIsInvalidJson) {
    try {
        Tokenizer::from_json("777777777777777777777777777777e7777777777777777777777j", "big.json");
        FAIL() << "no error";
    } catch (const TokenizerError& e) {
        EXPECT_NE(std::string(e.what()).find("big.json: invalid JSON"), std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace loom::tokenizer
